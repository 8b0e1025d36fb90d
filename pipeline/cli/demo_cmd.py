"""``volunteer demo``: the whole pipeline on embedded services, from nothing, in one command."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import click

from pipeline.cli.up_cmd import EmbeddedServices
from topics.records import Turn, Volunteered, decode_turn

READY_TIMEOUT_S = 60.0
RESULT_TIMEOUT_S = 60.0


def samples_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "samples"


def say(message: str) -> None:
    click.echo(click.style("▸ ", fg="cyan") + message, err=True)


def sample_turns(path: Path, now_ms: int) -> list[Turn]:
    """The sample transcript's turns, re-stamped to the last minute so stats see them as recent."""
    turns = []
    for raw in path.read_bytes().splitlines():
        turn = decode_turn(raw) if raw.strip() else None
        if turn is not None:
            turns.append(turn)
    for i, turn in enumerate(turns):
        turns[i] = Turn(turn.session_id, turn.role, turn.text, turn.turn, now_ms - (len(turns) - i) * 1000,
                        turn.source_id, turn.channel)
    return turns


def expected_pages(turns: list[Turn], brain_dir: Path) -> int:
    """What the worker must volunteer: the same per-session logic, run in-process (``replay``)."""
    from pipeline.braindir import load_brain_dir
    from pipeline.core.session import DecisionOptions
    from pipeline.replay import replay_lines

    summary = replay_lines((t.to_json() for t in turns), load_brain_dir(brain_dir), options=DecisionOptions())
    return summary.pages


@dataclass
class WorkerProcess:
    """``volunteer worker`` as a child process in its own session (Ctrl-C reaches us, not it)."""

    env: dict[str, str]
    log_path: Path
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "worker", *self.args], env=self.env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        finally:
            log.close()

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise click.ClickException(f"the worker exited with status {self.proc.returncode}; its log "
                                       f"({self.log_path}) ends with:\n{self.tail()}")

    def stop(self, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


async def _wait_ready(worker: WorkerProcess) -> None:
    from pipeline.agents.wiring import READY_MARK

    deadline = time.monotonic() + READY_TIMEOUT_S
    while READY_MARK not in worker.log_text():
        worker.check_alive()
        if time.monotonic() > deadline:
            raise click.ClickException(f"the worker did not become ready in {READY_TIMEOUT_S:.0f}s; log tail:\n"
                                       f"{worker.tail()}")
        await asyncio.sleep(0.1)


def _page_line(event: Volunteered) -> str:
    from pipeline.cli.watch_cmd import human_line

    return click.style("  ⇢ ", fg="green") + human_line(event)


async def _run(services: EmbeddedServices, worker: WorkerProcess, turns: list[Turn], expect: int,
               pace: float) -> list[Volunteered]:
    from pipeline.settings import load_settings
    from topics.clients import make_producer
    from topics.definitions import ensure_topics
    from topics.io import TopicReader, send_records, turn_items

    settings = load_settings(broker=services.broker_url, database_url=services.database_url,
                             topic_partitions=4, app_id="volunteer-demo")
    await ensure_topics(settings)
    worker.start()
    say(f"started a worker (pid {worker.proc.pid if worker.proc else '?'}, log {worker.log_path}); "
        "waiting until it owns its partitions")
    await _wait_ready(worker)

    pages: list[Volunteered] = []
    async with TopicReader(settings, settings.topic_volunteered, from_beginning=True) as reader:

        async def collect() -> None:
            async for batch in reader.batches(timeout_ms=50):
                for record in batch:
                    if record.value is not None:
                        event = Volunteered.from_json(record.value)
                        pages.append(event)
                        click.echo(_page_line(event))
                if len(pages) >= expect:
                    return

        collector = asyncio.ensure_future(collect())
        say(f"feeding {len(turns)} turns of {len({t.session_id for t in turns})} sessions; pages appear as the "
            "worker volunteers them")
        producer = make_producer(settings)
        await producer.start()
        try:
            for turn in turns:
                click.echo(f"[{turn.session_id} turn {turn.turn}] {turn.role}: {turn.text}")
                await send_records(producer, settings.topic_turns, turn_items([turn]))
                await asyncio.sleep(pace)
        finally:
            await producer.stop()
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while not collector.done():
            worker.check_alive()
            if time.monotonic() > deadline:
                collector.cancel()
                raise click.ClickException(f"only {len(pages)} of {expect} pages arrived within "
                                           f"{RESULT_TIMEOUT_S:.0f}s; worker log tail:\n{worker.tail()}")
            await asyncio.sleep(0.1)
    return pages


def _wait_rows(url: str, expect: int, worker: WorkerProcess) -> list[tuple[object, ...]]:
    import psycopg

    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while True:
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT session_id, turn, slug, match_arm, round(confidence::numeric, 2), channel, "
                "to_char(volunteered_at AT TIME ZONE 'UTC', 'HH24:MI:SS') FROM context_volunteer_events "
                "ORDER BY session_id, turn, id").fetchall()
        if len(rows) >= expect:
            return rows
        worker.check_alive()
        if time.monotonic() > deadline:
            raise click.ClickException(f"only {len(rows)} of {expect} events reached the table")
        time.sleep(0.1)


def pages_to_open(volunteered: list[Volunteered]) -> list[Volunteered]:
    """What the demo's "user" opens: the first page each session was offered (each page once)."""
    chosen: dict[str, Volunteered] = {}
    seen: set[tuple[str, str]] = set()
    for event in volunteered:
        page = (event.page.source_id, event.page.slug)
        if event.session_id not in chosen and page not in seen:
            chosen[event.session_id] = event
            seen.add(page)
    return list(chosen.values())


def _open_pages(services: EmbeddedServices, worker: WorkerProcess, opened: list[Volunteered]) -> None:
    """Publish page opens like an application would, then wait until the worker has applied them."""
    import psycopg

    from pipeline.settings import load_settings
    from topics.page_opens import PageOpen, produce_page_opens

    settings = load_settings(broker=services.broker_url, database_url=services.database_url,
                             topic_partitions=4, app_id="volunteer-demo")
    opens = [PageOpen(e.page.slug, e.page.source_id, e.session_id) for e in opened]
    asyncio.run(asyncio.wait_for(produce_page_opens(settings, opens), RESULT_TIMEOUT_S))
    deadline = time.monotonic() + RESULT_TIMEOUT_S
    while True:
        with psycopg.connect(services.database_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pages p JOIN unnest(%s::text[], %s::text[]) AS o(source_id, slug) "
                "USING (source_id, slug) WHERE p.last_retrieved_at IS NOT NULL",
                ([o.source_id for o in opens], [o.slug for o in opens])).fetchone()
        if row is not None and int(row[0]) >= len(opens):
            return
        worker.check_alive()
        if time.monotonic() > deadline:
            raise click.ClickException(f"the worker did not apply the page opens within {RESULT_TIMEOUT_S:.0f}s")
        time.sleep(0.1)


def _print_rows(rows: list[tuple[object, ...]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"context_volunteer_events ({len(rows)} rows)", title_justify="left")
    for name in ("session", "turn", "slug", "arm", "conf.", "channel", "at (UTC)"):
        table.add_column(name)
    for row in rows:
        table.add_row(*(str(v) for v in row))
    Console(width=110).print(table)


@click.command(name="demo")
@click.option("--pace", type=click.FloatRange(0, 10), default=0.3, show_default=True, metavar="SECONDS",
              help="Pause between turns, so the pages can be seen arriving live.")
@click.option("--keep-logs", is_flag=True, help="Keep the worker log and data folder (their path is printed).")
def demo(pace: float, keep_logs: bool) -> None:
    """Run the whole pipeline on embedded services, then shut everything down.

    \b
    1. starts an embedded Tansu broker and an embedded PostgreSQL, and migrates it
    2. imports the sample brain (pipeline/samples/brain) into PostgreSQL
    3. starts a worker ('volunteer worker') as a child process
    4. feeds the sample transcript (3 sessions, 12 turns) to the 'turns' topic
    5. prints each volunteered page as it arrives on the 'volunteered' topic
    6. shows the rows in context_volunteer_events
    7. opens some of the volunteered pages the way an application reports it (records on the
       'page-opens' topic, like 'volunteer opened'), so the worker marks them as retrieved
    8. shows the stats ('volunteer stats'): precision per arm and channel
    9. stops the worker, the broker and the database (also on Ctrl-C)

    Needs nothing running and no configuration; everything listens on 127.0.0.1 and is removed
    afterwards. Exit status 0 when every expected page arrived and was stored.
    """
    from pipeline.agents.statecrypt import new_key_text
    from pipeline.braindir import iter_brain_dir
    from sinks.brain_import import import_brain
    from sinks.db import redact
    from sinks.stats import format_stats, usage_stats

    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="volunteer-demo-"))
    services = EmbeddedServices()
    worker: WorkerProcess | None = None
    interrupted: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        interrupted.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        say("starting the embedded broker and PostgreSQL")
        services.start()
        say(f"broker {services.broker_url}, database {redact(services.database_url)} (migrated)")
        brain_dir = samples_dir() / "brain"
        pages, aliases = iter_brain_dir(brain_dir)
        report = import_brain(services.database_url, pages, aliases)
        say(f"imported the sample brain: {report.pages_total} pages")

        turns = sample_turns(samples_dir() / "transcript.jsonl", int(time.time() * 1000))
        expect = expected_pages(turns, brain_dir)
        env = dict(os.environ, VOLUNTEER_BROKER=services.broker_url, VOLUNTEER_DATABASE_URL=services.database_url,
                   VOLUNTEER_DATA_DIR=str(workdir / "data"), VOLUNTEER_APP_ID="volunteer-demo",
                   VOLUNTEER_TOPIC_PARTITIONS="4", VOLUNTEER_BRAIN_REFRESH_SECONDS="1",
                   VOLUNTEER_METRICS_PORT="0", VOLUNTEER_LOG_FORMAT="console",
                   VOLUNTEER_STATE_KEY=new_key_text())  # throwaway states, throwaway key (no file in ~)
        env.pop("VOLUNTEER_BRAIN", None)
        worker = WorkerProcess(env, workdir / "worker.log", ["--without-web", "--loglevel", "info"])
        volunteered = asyncio.run(_run(services, worker, turns, expect, pace))
        say(f"{len(volunteered)} pages volunteered; waiting for the sink to store them")
        rows = _wait_rows(services.database_url, expect, worker)
        click.echo("")
        _print_rows(rows)
        click.echo("")
        opened = pages_to_open(volunteered)
        say(f"the user opens {len(opened)} of the {len({(e.page.source_id, e.page.slug) for e in volunteered})} pages "
            f"offered (page-opens topic): {', '.join(e.page.slug for e in opened)}")
        _open_pages(services, worker, opened)
        click.echo(format_stats(usage_stats(services.database_url, ["default"], 30)), nl=False)
    except KeyboardInterrupt:
        say("interrupted; shutting down")
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with suppress(KeyboardInterrupt):
            if worker is not None:
                status = worker.stop()
                if status not in (None, 0) and not interrupted:
                    click.echo(f"warning: the worker exited with status {status}", err=True)
            services.stop()
            if keep_logs:
                say(f"worker log and data kept in {workdir}")
            else:
                shutil.rmtree(workdir, ignore_errors=True)
    if interrupted:
        sys.exit(130)
    say(f"stopped the worker, the broker and the database ({time.monotonic() - started:.1f}s in all)")
