"""The tuning side of ``volunteer replay``: flag checks, ``--sweep``/``--score`` and ``--to-topic``.

``pipeline/cli/replay_cmd.py`` declares the flags and calls these functions, so the command module
stays small. This is command-line code (click, flags, progress on stderr) over the tuning package
(:mod:`pipeline.tuning`), which stays free of the CLI: the import arrows run cli -> tuning only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
import orjson

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions
from topics.records import InvalidRecord, Turn, decode_turn

if TYPE_CHECKING:  # a plain replay runs only check_flags: the grid code loads with a sweep
    from pipeline.tuning.grid import Setting


def check_flags(*, sweep: Sequence[str], score: bool, jobs: int | None, plot: str | None, to_topic: bool,
                rate: str | None, channel: str | None, broker: str | None, keep_ts: bool, as_json: bool,
                decision_flags: Sequence[str]) -> None:
    """Refuse flag combinations that would be silently ignored."""
    tuning = bool(sweep) or score
    if to_topic:
        extra = [name for name, given in (("--sweep", bool(sweep)), ("--score", score), ("--jobs", jobs is not None),
                                          ("--plot", plot is not None), ("--json", as_json)) if given]
        extra += list(decision_flags)
        if extra:
            raise click.UsageError(f"--to-topic only publishes the records (the worker's own settings decide "
                                   f"what it volunteers); drop {', '.join(extra)}")
        return
    publish_only = [name for name, given in (("--rate", rate is not None), ("--channel", channel is not None),
                                             ("--broker", broker is not None), ("--keep-ts", keep_ts)) if given]
    if publish_only:
        raise click.UsageError(f"{', '.join(publish_only)} only apply with --to-topic")
    if not tuning:
        needs = [name for name, given in (("--jobs", jobs is not None), ("--plot", plot is not None)) if given]
        if needs:
            raise click.UsageError(f"{', '.join(needs)} only apply to a sweep: add --sweep NAME=VALUES or --score")
    if plot is not None:
        from pipeline.tuning.plot import PlotError, check_plot_path  # plain replays never load the plot code

        try:
            check_plot_path(plot)
        except PlotError as exc:
            raise click.UsageError(str(exc)) from None


def grid_or_fail(sweeps: Sequence[str], base: DecisionOptions) -> list[Setting]:
    """The settings to replay (just the base one for ``--score``), or a one-line usage error."""
    from pipeline.tuning.grid import GridError, base_setting, build_grid, parse_sweeps

    try:
        return build_grid(base_setting(base), parse_sweeps(sweeps))
    except GridError as exc:
        raise click.UsageError(str(exc)) from None


def read_lines(file: IO[bytes]) -> list[bytes]:
    """All lines (split on ``\\n`` only, like iterating the file, so line numbers agree)."""
    data = file.read()
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def _stdout_console() -> Any:
    import shutil

    from rich.console import Console

    if sys.stdout.isatty():
        return Console(file=sys.stdout)
    return Console(file=sys.stdout, width=max(140, shutil.get_terminal_size((140, 24)).columns), no_color=True)


class _SweepProgress:
    """A progress bar on stderr without a refresh thread (sweep processes are forked while it runs),
    redrawn whenever a process reports turns."""

    def __init__(self, settings: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.settings = settings
        self.progress = Progress(TextColumn("sweeping {task.fields[what]}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("turn replays"), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=True, auto_refresh=False)
        self.task = self.progress.add_task("sweep", total=None, what=f"{settings} setting(s)")

    def __enter__(self) -> _SweepProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def total(self, lines: int) -> None:
        self.progress.update(self.task, total=lines * self.settings)
        self.progress.refresh()

    def advance(self, turns: int) -> None:
        self.progress.advance(self.task, turns)
        self.progress.refresh()


def sweep_command(file: IO[bytes], brain: BrainIndex, grid: Sequence[Setting], base: DecisionOptions, *,
                  jobs: int | None, as_json: bool, plot: str | None, progress: bool | None,
                  default_source: str, max_text_bytes: int) -> None:
    """Run the grid over the transcript and print the table (or JSON lines); write the plot."""
    from pipeline.tuning.parallel import default_jobs, run_sweep
    from pipeline.tuning.report import print_report, setting_rows

    jobs = jobs or default_jobs()
    if file is sys.stdin.buffer and sys.stdin.isatty():
        click.echo("reading Turn records from the terminal; end with Ctrl-D", err=True)
    lines = read_lines(file)
    if progress is None:
        progress = sys.stderr.isatty() and not (as_json and not sys.stdout.isatty())
    started = time.perf_counter()
    if progress:
        with _SweepProgress(len(grid)) as bar:
            result = run_sweep(lines, brain, grid, base, jobs=jobs, default_source=default_source,
                               max_text_bytes=max_text_bytes, progress=bar.advance, on_split=bar.total)
    else:
        result = run_sweep(lines, brain, grid, base, jobs=jobs, default_source=default_source,
                           max_text_bytes=max_text_bytes)
    seconds = time.perf_counter() - started
    for problem in result.problems:
        click.echo(problem.render(), err=True)
    out = sys.stdout.buffer
    if as_json:
        for row in setting_rows(result, grid):
            out.write(orjson.dumps(row) + b"\n")
        out.flush()
    else:
        used = min(jobs, max(1, result.sessions))
        print_report(_stdout_console(), result, grid, jobs=used, seconds=seconds)
    if plot is not None:
        name = getattr(file, "name", "-")
        tally = result.tallies[0]
        subtitle = (f"{Path(str(name)).name}: {tally.turns} turns in {result.sessions} sessions, "
                    f"{tally.labelled_turns} labelled; lexical arms {'on' if base.lexical_arms else 'off'}")
        title = ("volunteer replay --sweep: precision and recall" if tally.labelled else
                 "volunteer replay --sweep: pages per turn (no labels, so no precision or recall)")
        from pipeline.tuning.plot import write_plot

        write_plot(plot, grid, result.tallies, title=title, subtitle=subtitle)
        click.echo(f"plot written to {plot}", err=True)
    if result.lines and result.lines == result.bad:
        raise click.ClickException(f"none of the {result.lines} line(s) was a usable Turn record")


# ----------------------------------------------------------------------------- publishing


def _turns_for_publishing(lines: Sequence[bytes], max_text_bytes: int) -> tuple[list[Turn], int, int]:
    """Decodable Turn records; bad lines are reported on stderr and skipped. -> (turns, lines, bad)."""
    turns: list[Turn] = []
    count = bad = 0
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        count += 1
        try:
            turn = decode_turn(raw, max_text_bytes=max_text_bytes)
        except InvalidRecord as exc:
            bad += 1
            click.echo(f"line {lineno}: {exc.code}: {exc.message}", err=True)
            continue
        if turn is not None:
            turns.append(turn)
    return turns, count, bad


def _check_channel(channel: str) -> None:
    try:
        decode_turn(orjson.dumps({"session_id": "s", "role": "user", "text": "x", "channel": channel}))
    except InvalidRecord as exc:
        raise click.UsageError(f"--channel {channel!r}: {exc.message}") from None


def publish_command(file: IO[bytes], *, broker: str | None, rate: str | None, channel: str | None,
                    keep_ts: bool, progress: bool | None) -> None:
    """``--to-topic``: publish the transcript's records to the turns topic at the chosen rate."""
    from pipeline.cli.options import settings_with_flags
    from pipeline.tuning.publish import DEFAULT_CHANNEL, RateError, parse_rate, schedule

    channel = DEFAULT_CHANNEL if channel is None else channel
    _check_channel(channel)
    try:
        pace = parse_rate(rate or "original")
    except RateError as exc:
        raise click.UsageError(str(exc)) from None
    settings = settings_with_flags({}, broker=broker)
    if file is sys.stdin.buffer and sys.stdin.isatty():
        click.echo("reading Turn records from the terminal; end with Ctrl-D", err=True)
    turns, count, bad = _turns_for_publishing(read_lines(file), settings.max_text_bytes)
    if count and count == bad:
        raise click.ClickException(f"none of the {count} line(s) was a usable Turn record")
    if not turns:
        click.echo("nothing to publish (no Turn records)", err=True)
        return
    try:
        offsets = schedule(turns, pace)
    except RateError as exc:
        raise click.UsageError(str(exc)) from None
    if progress is None:
        progress = sys.stderr.isatty()
    click.echo(f"publishing {len(turns)} turn(s) to {settings.topic_turns} on {settings.broker} at "
               f"{pace.describe()} (about {offsets[-1]:.1f} s), channel {channel}", err=True)
    # aiokafka logs each failed connection attempt; the one-line error below says it once.
    import asyncio
    import logging

    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    try:
        summary = asyncio.run(_publish(settings, turns, offsets, channel, keep_ts, progress))
    except (TimeoutError, OSError) as exc:
        raise click.ClickException(f"cannot publish to the broker at {settings.broker}: {exc or 'timed out'}") from None
    except Exception as exc:
        from pipeline.client import PublishError, TopicUnavailable

        if isinstance(exc, TopicUnavailable | PublishError) or type(exc).__module__.startswith(("aiokafka", "topics")):
            raise click.ClickException(f"cannot publish to the broker at {settings.broker}: {exc}") from None
        raise
    rate_seen = summary.sent / summary.seconds if summary.seconds > 0 else float("inf")
    click.echo(f"published {summary.sent} turn(s) of {summary.sessions} session(s) to {settings.topic_turns} "
               f"(channel {channel}) in {summary.seconds:.1f} s, {rate_seen:.0f} turns/s"
               + (f"; {bad} bad line(s) skipped" if bad else ""), err=True)


async def _publish(settings: Any, turns: Sequence[Turn], offsets: Sequence[float], channel: str, keep_ts: bool,
                   progress: bool) -> Any:
    from pipeline.tuning.publish import publish_turns

    if not progress:
        return await publish_turns(settings, turns, offsets, channel=channel, keep_ts=keep_ts)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = [TextColumn("publishing"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("publish", total=len(turns))
        return await publish_turns(settings, turns, offsets, channel=channel, keep_ts=keep_ts,
                                   on_sent=lambda n: bar.advance(task, n))
