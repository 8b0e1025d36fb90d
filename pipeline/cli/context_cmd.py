"""``volunteer context``: the one-shot op over a window of turns (gbrain ``volunteer-context``)."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, BinaryIO

import click
import orjson

from pipeline.cli.options import (
    brain_options,
    fail_on_db_error,
    gate_flags,
    gate_values,
    load_brain,
    settings_or_fail,
)
from pipeline.core.brain import BrainIndex
from pipeline.core.jscompat import js_number
from pipeline.core.normalize import JS_WHITESPACE
from pipeline.core.op import WINDOW_REQUIRED
from pipeline.core.render import format_result
from pipeline.core.request import (
    MAX_WINDOW_BYTES,
    RequestDefaults,
    attribution,
    clamp_session_id,
    clamp_turn,
    evaluate,
)

if TYPE_CHECKING:
    from pipeline.mcp.oplog import OpEventLog

__all__ = ["MAX_WINDOW_BYTES", "load_brain", "read_window", "run_batch"]


# ---------------------------------------------------------------------------- input


def read_window(stream: BinaryIO) -> str:
    """All of stdin as the window: at most 5,000,000 bytes of UTF-8, else a one-line error (exit 1)."""
    data = stream.read(MAX_WINDOW_BYTES + 1)
    if len(data) > MAX_WINDOW_BYTES:
        raise click.ClickException(f"stdin is over {MAX_WINDOW_BYTES:,} bytes; the window limit is {MAX_WINDOW_BYTES:,}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise click.ClickException(f"stdin line {line}: not valid UTF-8 (byte {exc.start})") from None


def _emit(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj) + b"\n")
    sys.stdout.buffer.flush()


def _warn(lineno: int, message: str) -> None:
    click.echo(f"line {lineno}: {message}", err=True)


def _batch_request(
    lineno: int, raw: bytes, defaults: RequestDefaults, brain: BrainIndex
) -> tuple[dict[str, Any], bool, dict[str, Any] | None]:
    """One request line -> (result object, ok, the request). Problems go to stderr with the line number."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"not valid UTF-8 (byte {exc.start})"
        _warn(lineno, message)
        return {"error": "invalid_request", "message": message}, False, None
    try:
        request = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        message = f"not valid JSON ({exc})"
        _warn(lineno, message)
        return {"error": "invalid_request", "message": message}, False, None
    if not isinstance(request, dict):
        message = f"a request must be a JSON object, got {type(request).__name__}"
        _warn(lineno, message)
        return {"error": "invalid_request", "message": message}, False, None
    outcome = evaluate(request, defaults, brain)
    for warning in outcome.warnings:
        _warn(lineno, warning)
    return outcome.result, outcome.ok, request


def run_batch(
    stream: Iterable[bytes], defaults: RequestDefaults, brain: BrainIndex, log: OpEventLog | None = None
) -> tuple[int, int]:
    """JSON lines in, one result line out per request line, in order. Returns (requests, good).

    With ``log``, each request's pages are handed to it with the request's ``session_id`` / ``turn``
    (after the result line is written: logging never delays an answer).
    """
    total = good = 0
    for lineno, raw in enumerate(stream, start=1):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        total += 1
        result, ok, request = _batch_request(lineno, line, defaults, brain)
        good += ok
        _emit(result)
        if log is not None and ok and request is not None and result["pages"]:
            session_id, turn = attribution(request)
            log.submit(result["pages"], session_id, turn)
    return total, good


# ---------------------------------------------------------------------------- command


@click.command(name="context")
@brain_options
@click.option("--window", "window_text", metavar="TEXT", help="The window itself, instead of reading stdin.")
@click.option("--prior-context", metavar="TEXT", help="Already-shown context: pages whose slug appears in it are not volunteered.")
@gate_flags
@click.option("--source", "sources", multiple=True, metavar="ID", help="Brain source to resolve against; repeat for several (default: default).")
@click.option("--json", "as_json", is_flag=True, help='Print {"pages": [...], "count": n, "window_turns": n} as JSON.')
@click.option("--batch", is_flag=True, help="JSON lines in (one request per line), one JSON result line out per request.")
@click.option("--stats", is_flag=True, help="Print volunteered-vs-used precision from the events table instead (needs --database-url).")
@click.option("--days", default="30", show_default=True, metavar="N", help="Look-back window of --stats.")
@click.option("--log", "log_events", is_flag=True,
              help="Log the volunteered pages as events (channel 'op') in the database of --database-url / "
                   "VOLUNTEER_DATABASE_URL, so 'volunteer stats' counts them. Best-effort: an unreachable "
                   "database is a warning, never a failure.")
@click.option("--session-id", metavar="ID", help="With --log: the caller's session (truncated to 256 characters).")
@click.option("--turn", metavar="N", help="With --log: the caller's turn number (logged only when an integer).")
def context(
    brain_dir: str | None,
    database_url: str | None,
    window_text: str | None,
    prior_context: str | None,
    sources: tuple[str, ...],
    as_json: bool,
    batch: bool,
    stats: bool,
    days: str,
    log_events: bool,
    session_id: str | None,
    turn: str | None,
    **gate: Any,
) -> None:
    """Volunteer brain pages for a conversation window, once (no broker, no state).

    The window is read from stdin as 'user: ...' / 'assistant: ...' lines, oldest first; an
    unprefixed line continues the turn above it, and text with no prefix at all is one user turn.
    Pages are resolved exactly as gbrain's volunteer-context does (alias 0.9, exact title 0.8,
    surname / CJK 0.72, slug suffix 0.6, +0.05 when mentioned in the newest turn or in several
    turns) and only those at or above the gate (0.7) are printed, at most --max-pages.

    \b
    Examples:
      printf 'user: who knows the seed market?\\nassistant: Alice Example does.\\n' \\
        | volunteer context --brain pipeline/samples/brain
      volunteer context --brain DIR --json --window 'user: ping Alice Example'
      volunteer context --database-url postgresql://... --source default --source team < window.txt
      volunteer context --brain DIR --batch < requests.jsonl > results.jsonl
      volunteer context --database-url postgresql://... --log --session-id s1 --turn 3 < window.txt
      volunteer context --stats --days 7 --database-url postgresql://...

    \b
    --batch request:  {"window": "...", "prior_context"?, "max_pages"?, "min_confidence"?,
                       "source_ids"?, "lexical_arms"?, "exclude_slug_prefixes"?,
                       "session_id"?, "turn"?}   (the last two only matter with --log)
    --batch result:   {"pages": [...], "count": n, "window_turns": n}
                      or {"error": "invalid_params", "message": "..."}

    Exit status: 0 on success; 1 when the window is missing, blank, over 5,000,000 bytes or not
    UTF-8 (or, with --batch, when no request line was usable); 2 for a bad command line.
    """
    settings = settings_or_fail()
    if stats:
        _run_stats(database_url, sources or (settings.source,), days, as_json)
        return
    source_ids = list(sources) if sources else [settings.source]
    defaults = RequestDefaults(
        source_ids=tuple(source_ids),
        prior_context=prior_context,
        **gate_values(settings, gate),
    )
    if not log_events and (session_id is not None or turn is not None):
        raise click.UsageError("--session-id and --turn only matter with --log")
    if batch and (session_id is not None or turn is not None):
        raise click.UsageError("with --batch, give session_id / turn inside each request line")
    log = _open_log(database_url or settings.database_url) if log_events else None
    try:
        if batch:
            if window_text is not None:
                raise click.UsageError("--batch reads requests from stdin; it cannot be combined with --window")
            # Requests may name any source, so a database brain is loaded whole.
            brain = load_brain(brain_dir, database_url, None)
            if sys.stdin.isatty():
                click.echo("reading JSON requests from the terminal, one per line; end with Ctrl-D", err=True)
            total, good = run_batch(sys.stdin.buffer, defaults, brain, log)
            if total and not good:
                raise click.ClickException(f"none of the {total} request line(s) was usable")
            return
        _run_once(window_text, brain_dir, database_url, defaults, as_json, log,
                  clamp_session_id(session_id), clamp_turn(None if turn is None else js_number(turn)))
    finally:
        if log is not None:
            log.close()


def _open_log(url: str) -> OpEventLog:
    from pipeline.mcp.oplog import OpEventLog

    return OpEventLog(url)


def _run_once(window_text: str | None, brain_dir: str | None, database_url: str | None,
              defaults: RequestDefaults, as_json: bool, log: OpEventLog | None,
              session_id: str | None, turn: int | None) -> None:
    if window_text is not None:
        window: str = window_text
    elif sys.stdin.isatty():
        raise click.ClickException(f"{WINDOW_REQUIRED} (pipe 'user: ...' lines on stdin, or pass --window)")
    else:
        window = read_window(sys.stdin.buffer)
    if not window.strip(JS_WHITESPACE):
        raise click.ClickException(f"{WINDOW_REQUIRED} (pipe 'user: ...' lines on stdin, or pass --window)")
    brain = load_brain(brain_dir, database_url, defaults.source_ids)
    outcome = evaluate({"window": window}, defaults, brain)
    if not outcome.ok:
        raise click.ClickException(f"{outcome.result['message']} (pipe 'user: ...' lines on stdin, or pass --window)")
    result = outcome.result
    if as_json:
        _emit(result)
    else:
        click.echo(format_result(result), nl=False)
    if log is not None and result["pages"]:
        log.submit(result["pages"], session_id, turn)


def _run_stats(database_url: str | None, sources: Sequence[str], days: str, as_json: bool) -> None:
    if not database_url:
        raise click.UsageError("--stats reads the events table: pass --database-url URL (or set VOLUNTEER_DATABASE_URL)")
    try:
        from sinks.stats import run_stats_command
    except ImportError as exc:
        raise click.ClickException(f"stats are not available in this installation ({exc})") from None
    with fail_on_db_error(database_url):
        out = run_stats_command(database_url, list(sources), js_number(days), as_json)
    click.echo(out, nl=False)
