"""``volunteer context``: the one-shot op over a window of turns (gbrain ``volunteer-context``).

Also home of the brain options shared with ``volunteer replay`` (``--brain`` / ``--database-url``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, BinaryIO, TypeVar

import click
import orjson

from pipeline.core.brain import BrainIndex
from pipeline.core.jscompat import is_js_number, js_number
from pipeline.core.normalize import JS_WHITESPACE
from pipeline.core.op import WINDOW_REQUIRED, InvalidParams, volunteer_context
from pipeline.core.render import format_result

MAX_WINDOW_BYTES = 5_000_000
"""The reference's stdin cap; a longer window is refused (exit 1)."""

F = TypeVar("F", bound=Callable[..., Any])


# ---------------------------------------------------------------------------- shared brain options


def brain_options(func: F) -> F:
    """``--brain DIR`` (``VOLUNTEER_BRAIN``) or ``--database-url URL`` (``VOLUNTEER_DATABASE_URL``)."""
    func = click.option(
        "--database-url",
        metavar="URL",
        envvar="VOLUNTEER_DATABASE_URL",
        help="Load the brain from this PostgreSQL database (pages + page_aliases) instead of a directory "
        "[env: VOLUNTEER_DATABASE_URL].",
    )(func)
    return click.option(
        "--brain",
        "brain_dir",
        metavar="DIR",
        envvar="VOLUNTEER_BRAIN",
        type=click.Path(file_okay=False, path_type=str),
        help="Brain directory: DIR/pages.jsonl (+ optional DIR/aliases.jsonl). Wins over --database-url "
        "[env: VOLUNTEER_BRAIN].",
    )(func)


def load_brain(brain_dir: str | None, database_url: str | None, source_ids: Sequence[str] | None) -> BrainIndex:
    """The brain named by the options, or a one-line ``click`` error saying what to pass."""
    if brain_dir:
        from pipeline.braindir import BrainDirError, load_brain_dir

        try:
            return load_brain_dir(brain_dir)
        except (BrainDirError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
    if database_url:
        try:
            from sinks.brain_pg import load_brain as load_pg_brain
        except ImportError as exc:
            raise click.ClickException(f"the PostgreSQL brain loader is not available ({exc}); use --brain DIR") from None
        from sinks.cliopts import fail_on_db_error

        with fail_on_db_error(database_url):
            return load_pg_brain(database_url, list(source_ids) if source_ids else None)
    raise click.UsageError(
        "no brain: pass --brain DIR (or set VOLUNTEER_BRAIN), or --database-url URL "
        "(or set VOLUNTEER_DATABASE_URL). Try --brain with the bundled sample: "
        f"--brain {sample_brain_dir()}"
    )


def sample_brain_dir() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent / "samples" / "brain")


def number_option(text: str | None) -> float | None:
    """A numeric flag read like JavaScript's ``Number()``: ``abc`` is NaN (the core then uses its default)."""
    return None if text is None else js_number(text)


def settings_or_fail(**overrides: Any) -> Any:
    """:func:`pipeline.settings.load_settings`, turning a bad ``VOLUNTEER_*`` value into a one-line error."""
    from pydantic import ValidationError

    from pipeline.cli.errors import settings_error
    from pipeline.settings import load_settings

    try:
        return load_settings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from None


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


def _batch_request(lineno: int, raw: bytes, defaults: dict[str, Any], brain: BrainIndex) -> tuple[dict[str, Any], bool]:
    """One request line -> (result object, ok). Problems are reported on stderr with the line number."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        message = f"not valid UTF-8 (byte {exc.start})"
        _warn(lineno, message)
        return {"error": "invalid_request", "message": message}, False
    try:
        request = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        message = f"not valid JSON ({exc})"
        _warn(lineno, message)
        return {"error": "invalid_request", "message": message}, False
    if not isinstance(request, dict):
        message = f"a request must be a JSON object, got {type(request).__name__}"
        _warn(lineno, message)
        return {"error": "invalid_request", "message": message}, False

    window = request.get("window")
    if isinstance(window, str) and len(window.encode("utf-8", "surrogatepass")) > MAX_WINDOW_BYTES:
        message = f"window is over {MAX_WINDOW_BYTES:,} bytes"
        _warn(lineno, message)
        return {"error": "invalid_params", "message": message}, False

    source_ids = request.get("source_ids", defaults["source_ids"])
    if not isinstance(source_ids, list) or not all(isinstance(s, str) and s for s in source_ids):
        message = "source_ids must be a list of non-empty strings"
        _warn(lineno, message)
        return {"error": "invalid_params", "message": message}, False
    for name in ("max_pages", "min_confidence"):
        if name in request and request[name] is not None and not is_js_number(request[name]):
            _warn(lineno, f"warning: {name} is not a number; the default applies")
    if "prior_context" in request and request["prior_context"] is not None and not isinstance(request["prior_context"], str):
        _warn(lineno, "warning: prior_context is not a string; ignored")
    lexical = request.get("lexical_arms", defaults["lexical_arms"])
    if not isinstance(lexical, bool):
        _warn(lineno, "warning: lexical_arms is not true/false; the default applies")
        lexical = defaults["lexical_arms"]
    try:
        result = volunteer_context(
            window,
            brain,
            source_ids=source_ids,
            prior_context=request.get("prior_context", defaults["prior_context"]),
            max_pages=request.get("max_pages", defaults["max_pages"]),
            min_confidence=request.get("min_confidence", defaults["min_confidence"]),
            lexical_arms=lexical,
            exclude_slug_prefixes=defaults["exclude_slug_prefixes"],
        )
    except InvalidParams as exc:
        _warn(lineno, exc.message)
        return exc.to_dict(), False
    return result, True


def run_batch(stream: Iterable[bytes], defaults: dict[str, Any], brain: BrainIndex) -> tuple[int, int]:
    """JSON lines in, one result line out per request line, in order. Returns (requests, good)."""
    total = good = 0
    for lineno, raw in enumerate(stream, start=1):
        line = raw.rstrip(b"\r\n")
        if not line.strip():
            continue
        total += 1
        result, ok = _batch_request(lineno, line, defaults, brain)
        good += ok
        _emit(result)
    return total, good


# ---------------------------------------------------------------------------- command


@click.command(name="context")
@brain_options
@click.option("--window", "window_text", metavar="TEXT", help="The window itself, instead of reading stdin.")
@click.option("--prior-context", metavar="TEXT", help="Already-shown context: pages whose slug appears in it are not volunteered.")
@click.option("--max-pages", metavar="N", help="Pages to volunteer, 1-5 (default 3; below 1 means 3, fractions floor).")
@click.option("--min-confidence", metavar="X", help="Confidence gate in [0, 1] (default 0.7; out of range or not a number means 0.7).")
@click.option("--source", "sources", multiple=True, metavar="ID", help="Brain source to resolve against; repeat for several (default: default).")
@click.option("--no-lexical-arms", is_flag=True, help="Turn off the weak-alias, surname and CJK arms (gbrain's kill switch).")
@click.option("--exclude-slug-prefix", "exclude_prefixes", multiple=True, metavar="PREFIX", help="Never volunteer slugs starting with PREFIX; repeatable.")
@click.option("--json", "as_json", is_flag=True, help='Print {"pages": [...], "count": n, "window_turns": n} as JSON.')
@click.option("--batch", is_flag=True, help="JSON lines in (one request per line), one JSON result line out per request.")
@click.option("--stats", is_flag=True, help="Print volunteered-vs-used precision from the events table instead (needs --database-url).")
@click.option("--days", default="30", show_default=True, metavar="N", help="Look-back window of --stats.")
def context(
    brain_dir: str | None,
    database_url: str | None,
    window_text: str | None,
    prior_context: str | None,
    max_pages: str | None,
    min_confidence: str | None,
    sources: tuple[str, ...],
    no_lexical_arms: bool,
    exclude_prefixes: tuple[str, ...],
    as_json: bool,
    batch: bool,
    stats: bool,
    days: str,
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
      volunteer context --stats --days 7 --database-url postgresql://...

    \b
    --batch request:  {"window": "...", "prior_context"?, "max_pages"?, "min_confidence"?,
                       "source_ids"?, "lexical_arms"?}
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
    defaults: dict[str, Any] = {
        "source_ids": source_ids,
        "prior_context": prior_context,
        "max_pages": number_option(max_pages) if max_pages is not None else settings.max_pages,
        "min_confidence": number_option(min_confidence) if min_confidence is not None else settings.min_confidence,
        "lexical_arms": settings.lexical_arms and not no_lexical_arms,
        "exclude_slug_prefixes": tuple(exclude_prefixes) or tuple(settings.exclude_slug_prefixes),
    }
    if batch:
        if window_text is not None:
            raise click.UsageError("--batch reads requests from stdin; it cannot be combined with --window")
        # Requests may name any source, so a database brain is loaded whole.
        brain = load_brain(brain_dir, database_url, None)
        if sys.stdin.isatty():
            click.echo("reading JSON requests from the terminal, one per line; end with Ctrl-D", err=True)
        total, good = run_batch(sys.stdin.buffer, defaults, brain)
        if total and not good:
            raise click.ClickException(f"none of the {total} request line(s) was usable")
        return

    if window_text is not None:
        window: str = window_text
    elif sys.stdin.isatty():
        raise click.ClickException(f"{WINDOW_REQUIRED} (pipe 'user: ...' lines on stdin, or pass --window)")
    else:
        window = read_window(sys.stdin.buffer)
    if not window.strip(JS_WHITESPACE):
        raise click.ClickException(f"{WINDOW_REQUIRED} (pipe 'user: ...' lines on stdin, or pass --window)")
    brain = load_brain(brain_dir, database_url, source_ids)
    try:
        result = volunteer_context(
            window,
            brain,
            source_ids=source_ids,
            prior_context=defaults["prior_context"],
            max_pages=defaults["max_pages"],
            min_confidence=defaults["min_confidence"],
            lexical_arms=defaults["lexical_arms"],
            exclude_slug_prefixes=defaults["exclude_slug_prefixes"],
        )
    except InvalidParams as exc:
        raise click.ClickException(f"{exc.message} (pipe 'user: ...' lines on stdin, or pass --window)") from None
    if as_json:
        _emit(result)
    else:
        click.echo(format_result(result), nl=False)


def _run_stats(database_url: str | None, sources: Sequence[str], days: str, as_json: bool) -> None:
    if not database_url:
        raise click.UsageError("--stats reads the events table: pass --database-url URL (or set VOLUNTEER_DATABASE_URL)")
    try:
        from sinks.cliopts import fail_on_db_error
        from sinks.stats import run_stats_command
    except ImportError as exc:
        raise click.ClickException(f"stats are not available in this installation ({exc})") from None
    with fail_on_db_error(database_url):
        out = run_stats_command(database_url, list(sources), js_number(days), as_json)
    click.echo(out, nl=False)
