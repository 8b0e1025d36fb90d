"""``volunteer replay``: a transcript of Turn records through the worker's per-session logic, in-process.

No broker, no database writes: each session gets its own :class:`SessionState` and every turn goes
through :func:`pipeline.core.session.step`, exactly as the stream worker does it. Handy for tuning
options on a recorded transcript and for checking what the worker will volunteer.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

import click
import orjson

from pipeline.cli.options import (
    brain_options,
    broker_option,
    decision_flags,
    decision_options_from_flags,
    given_decision_flags,
    load_brain,
    settings_if_set,
    settings_or_fail,
)
from pipeline.core.render import format_page
from pipeline.core.types import VolunteeredPage
from pipeline.replay import DEFAULT_SOURCE, replay_lines
from topics.records import DEFAULT_MAX_TEXT_BYTES, InvalidRecord


def page_json(session_id: str, turn: int, page: VolunteeredPage) -> bytes:
    """One ``--json`` line: session, turn, then the volunteered page in the reference's key order."""
    return orjson.dumps({"session_id": session_id, "turn": turn, **page.to_dict()}, option=orjson.OPT_APPEND_NEWLINE)


def _with_progress(stream: IO[bytes], enabled: bool) -> Iterable[bytes]:
    """The lines of ``stream``; on a terminal, with a transient progress bar on stderr."""
    return _progress_lines(stream) if enabled else stream  # no generator layer per line when off


def _progress_lines(stream: IO[bytes]) -> Iterator[bytes]:
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

    total: int | None = None
    try:
        if stream.seekable():
            total = os.fstat(stream.fileno()).st_size or None
    except (OSError, ValueError):
        total = None
    columns = [TextColumn("replaying"), BarColumn(), DownloadColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("replay", total=total)
        pending = 0
        for raw in stream:
            pending += len(raw)
            if pending >= 1 << 16:
                progress.advance(task, pending)
                pending = 0
            yield raw
        progress.advance(task, pending)


@click.command(name="replay")
@click.argument("file", type=click.File("rb"), metavar="FILE")
@brain_options
@decision_flags
@click.option("--json", "as_json", is_flag=True, help="One JSON line per volunteered page instead of the report (with --sweep/--score: one JSON object per setting).")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: only on a terminal).")
@click.option("--sweep", multiple=True, metavar="NAME=VALUES", help="Tuning: replay once per setting and report precision/recall of each. NAME: min_confidence, max_pages or window_turns; VALUES: a list (0.6,0.7,0.8) and/or inclusive ranges START:STOP:STEP (1:8:1). Repeat for several knobs: every combination runs.")
@click.option("--score", is_flag=True, help="Tuning report (precision/recall against the records' expected_slugs) for the current settings only.")
@click.option("--jobs", type=click.IntRange(min=1), metavar="N", help="Tuning: processes to replay on (default: one per CPU); sessions are split by a hash of session_id.")
@click.option("--plot", metavar="FILE", help="Tuning: write precision and recall against min_confidence to FILE (.html page or .svg image).")
@click.option("--to-topic", is_flag=True, help="Publish the records to the turns topic (for the worker) instead of replaying them here.")
@click.option("--rate", metavar="RATE", help="With --to-topic: 'original' (the pace of the records' ts; default), a speed-up such as 10x, or turns per second such as 500.")
@click.option("--channel", metavar="NAME", help="With --to-topic: the channel every record carries (default: replay), so live stats stay apart.")
@click.option("--keep-ts", is_flag=True, help="With --to-topic: keep the records' ts instead of stamping the time of sending.")
@broker_option
def replay(
    file: IO[bytes],
    brain_dir: str | None,
    database_url: str | None,
    as_json: bool,
    progress: bool | None,
    sweep: tuple[str, ...],
    score: bool,
    jobs: int | None,
    plot: str | None,
    to_topic: bool,
    rate: str | None,
    channel: str | None,
    keep_ts: bool,
    broker: str | None,
    **decision: Any,
) -> None:
    """Replay a transcript of Turn records (JSON lines; FILE, or - for stdin) per session.

    \b
    Each line is a Turn record, as on the 'turns' topic:
      {"session_id", "role", "text", "turn"?, "ts"?, "source_id"?, "channel"?}

    Sessions are independent; within a session, turns go through the same rolling window, session
    dedupe and gate as the worker (gbrain 'watch' semantics). A turn number at or below the last
    one seen for its session is a duplicate and is ignored. A bad line is reported on stderr with
    its line number and skipped.

    \b
    Examples:
      volunteer replay pipeline/samples/transcript.jsonl --brain pipeline/samples/brain
      volunteer replay turns.jsonl --brain DIR --window-turns 8 --min-confidence 0.6 --json
      cat turns.jsonl | volunteer replay - --database-url postgresql://...

    \b
    --json line: {"session_id", "turn", "slug", "source_id", "display", "confidence", "arm",
                  "rationale", "synopsis"}

    Tuning (docs/tuning.md): records may carry "expected_slugs" (pages that should be volunteered
    at that turn) and "acceptable_slugs" (fine, not required). --sweep replays every combination
    of the swept knobs on all CPUs and prints push precision and recall per setting and per arm.

    \b
      volunteer replay pipeline/samples/labelled_transcript.jsonl --brain pipeline/samples/brain \\
          --sweep min_confidence=0.6:0.8:0.05 --sweep window_turns=2,4,8 --plot sweep.html
      volunteer replay labelled.jsonl --brain DIR --score --json

    Publishing: --to-topic sends the records to the turns topic (--broker / VOLUNTEER_BROKER), keyed
    by session id, under channel "replay", at --rate (e.g. volunteer replay t.jsonl --to-topic
    --rate 500).

    Exit status: 0 when at least one line was a usable Turn record (or the input was empty),
    1 when none was, 2 for a bad command line.
    """
    from pipeline.cli.replay_tuning import check_flags, grid_or_fail, publish_command, sweep_command

    check_flags(sweep=sweep, score=score, jobs=jobs, plot=plot, to_topic=to_topic, rate=rate, channel=channel,
                broker=broker, keep_ts=keep_ts, as_json=as_json, decision_flags=given_decision_flags(decision))
    if to_topic:
        gc.enable()  # off from pipeline.entry; a publisher can run for hours
        publish_command(file, broker=broker, rate=rate, channel=channel, keep_ts=keep_ts, progress=progress)
        return
    # None: no VOLUNTEER_* variable, the defaults, taken from the core without importing pydantic. A
    # sweep's report prints the knobs as the settings hold them (4.0, not the core's 4): it reads them.
    settings = settings_or_fail() if sweep or score else settings_if_set()
    options = decision_options_from_flags(settings, decision)
    source = decision["source"] or (DEFAULT_SOURCE if settings is None else settings.source)
    max_text_bytes = DEFAULT_MAX_TEXT_BYTES if settings is None else settings.max_text_bytes
    grid = grid_or_fail(sweep, options) if sweep or score else None
    brain = load_brain(brain_dir, database_url, None)
    gc.freeze()  # the brain lives as long as the process: keep it out of every full collection
    gc.enable()  # pipeline.entry starts a replay with it off, for the imports and the brain load
    if grid is not None:
        sweep_command(file, brain, grid, options, jobs=jobs, as_json=as_json, plot=plot, progress=progress,
                      default_source=source, max_text_bytes=max_text_bytes)
        return
    if file is sys.stdin.buffer and sys.stdin.isatty():
        click.echo("reading Turn records from the terminal; end with Ctrl-D", err=True)

    out = sys.stdout.buffer
    if progress is None:
        progress = sys.stderr.isatty() and not (as_json and not sys.stdout.isatty())

    def on_page(session_id: str, turn: int, page: VolunteeredPage) -> None:
        if as_json:
            out.write(page_json(session_id, turn, page))
        else:
            out.write(f"[{session_id} turn {turn}] {format_page(page)}\n".encode())

    def on_error(lineno: int, exc: InvalidRecord) -> None:
        click.echo(f"line {lineno}: {exc.code}: {exc.message}", err=True)

    # The loop makes no reference cycles (states are lists, tuples and dicts that only grow), but
    # every collection would walk all sessions' states again: a fifth of the run's CPU went there.
    gc.disable()
    try:
        summary = replay_lines(
            _with_progress(file, progress),
            brain,
            options=options,
            default_source=source,
            max_text_bytes=max_text_bytes,
            on_page=on_page,
            on_error=on_error,
        )
    finally:
        gc.enable()
    if not as_json:
        if summary.pages:
            out.write(b"\n")
        out.write(summary.render().encode())
    out.flush()
    if summary.lines and summary.lines == summary.bad:
        raise click.ClickException(f"none of the {summary.lines} line(s) was a usable Turn record")
