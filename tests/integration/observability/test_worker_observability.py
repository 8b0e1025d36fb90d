"""One real worker on the embedded broker and PostgreSQL, observed from outside the way an operator would.

The module runs one scenario (a fixture) and the tests check what it recorded:

1. the sample brain in PostgreSQL, a worker with JSON logs and a metrics port;
2. the sample transcript (re-stamped to now) plus a malformed and a blank turn;
3. stats once every event is stored (nothing used yet);
4. page opens through ``volunteer opened`` (two pages, one of them twice), one for an unknown page and
   one malformed record, published like an application would;
5. stats again, the dead-letter topic, a metrics scrape once every offset is committed, ``volunteer
   doctor --json``; then SIGTERM, and the whole worker log.

Expected metric values are computed in-process by the same core over the same turns (a
:class:`DecisionTally` through :func:`step`), so the test checks the worker's wiring, not the core.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from pipeline.braindir import iter_brain_dir, load_brain_dir
from pipeline.cli import main as cli
from pipeline.cli.demo_cmd import sample_turns, samples_dir
from pipeline.core.session import DecisionOptions, SessionState, step
from pipeline.core.tally import DecisionTally
from pipeline.settings import Settings
from sinks.brain_import import import_brain
from sinks.stats import UsageStats, usage_stats
from tests.integration.stream.harness import WorkerProc, run, wait_for_rows, worker_env
from tests.services.broker import new_names, settings_for
from tests.services.postgres import _create_database, _drop_database
from topics.clients import make_producer
from topics.definitions import ensure_topics
from topics.io import read_all, send_records
from topics.records import DeadLetter, Turn

pytestmark = pytest.mark.integration

MARKER = "zebra-quartz-1729 secret words"
"""Text of the malformed turn: it must reach the dead-letter topic and never the log."""

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@dataclass
class Scenario:
    settings: Settings
    turns: list[Turn]
    expected: DecisionTally
    rows: list[tuple[Any, ...]]
    opened: list[str]
    before: UsageStats
    after: UsageStats
    dead_letters: list[DeadLetter]
    metrics: Samples
    doctor: dict[str, Any]
    doctor_exit: int
    opened_output: str
    log: str
    exit_code: int
    env: dict[str, str] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def scrape(port: int) -> Samples:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def lag_values(samples: Samples) -> list[float]:
    return [v for (name, _), v in samples.items() if name == "volunteer_consumer_lag"]


def expected_tally(turns: list[Turn], brain_dir: Path) -> DecisionTally:
    brain = load_brain_dir(brain_dir)
    tally = DecisionTally()
    states: dict[str, SessionState] = {}
    for t in turns:
        state = states.setdefault(t.session_id, SessionState())
        step(state, t.role, t.text, brain, source_id="default", options=DecisionOptions(), turn_no=t.turn,
             tally=tally)
    return tally


def wait_until(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def retrieved_pages(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pages WHERE last_retrieved_at IS NOT NULL").fetchone()
    return int(row[0]) if row else 0


@pytest.fixture(scope="module")
def scenario(module_broker_url: str, postgres_server_url: str, _migrated_template: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    from sinks.db import with_database

    dbname = _create_database(postgres_server_url, template=_migrated_template)
    database_url = with_database(postgres_server_url, dbname)
    names = new_names()
    settings = settings_for(module_broker_url, names, database_url=database_url, topic_partitions=2,
                            topic_page_opens=names.topic("page-opens"))
    tmp = tmp_path_factory.mktemp("observability")
    brain_dir = samples_dir() / "brain"
    pages, aliases = iter_brain_dir(brain_dir)
    import_brain(database_url, pages, aliases)
    run(ensure_topics(settings))
    port = free_port()
    env = worker_env(settings, tmp / "data", VOLUNTEER_TOPIC_PAGE_OPENS=settings.topic_page_opens,
                     VOLUNTEER_METRICS_PORT=str(port), VOLUNTEER_LOG_FORMAT="json", VOLUNTEER_LOG_LEVEL="INFO")
    worker = WorkerProc(env, tmp / "worker.log")
    try:
        worker.start()
        worker.wait_ready()
        turns = sample_turns(samples_dir() / "transcript.jsonl", int(time.time() * 1000))
        expected = expected_tally(turns, brain_dir)
        items: list[tuple[bytes | None, bytes]] = [(t.session_id.encode(), t.to_json()) for t in turns]
        items.append((b"board-prep", b'{"session_id": "board-prep", "role": "user", "text": "' + MARKER.encode()))
        items.append((b"board-prep", orjson.dumps({"session_id": "board-prep", "role": "user", "text": "   "})))
        run(_send(settings, settings.topic_turns, items))
        pages_expected = sum(expected.volunteered.values())
        rows = wait_for_rows(database_url, pages_expected)
        before = usage_stats(database_url, ["default"], 30)

        counts: dict[str, int] = {}
        for row in rows:
            counts[row[2]] = counts.get(row[2], 0) + 1
        opened = sorted(counts, key=lambda s: (-counts[s], s))[:2]
        result = CliRunner().invoke(cli, ["opened", opened[0], opened[1], opened[0], "--session", "board-prep"],
                                    env={k: v for k, v in env.items() if k.startswith("VOLUNTEER_")})
        assert result.exit_code == 0, result.output
        bad_opens: list[tuple[bytes | None, bytes]] = [
            (b"default/no-such-page", b'{"slug": "no-such-page", "source_id": "default"}'),
            (b"x", b'{"slug": "people/alice-example"}'),
        ]
        run(_send(settings, settings.topic_page_opens, bad_opens))
        wait_until("the page opens to be applied", lambda: retrieved_pages(database_url) >= 2)
        after = usage_stats(database_url, ["default"], 30)
        dlq = run(read_all(settings, settings.topic_dlq, expect=2, timeout_s=60))
        dead = [DeadLetter(**orjson.loads(r.value)) for r in dlq if r.value is not None]

        def settled() -> Samples | None:
            got = scrape(port)
            done = got.get(("volunteer_page_opens_total", ()), 0) >= 4
            lags = lag_values(got)
            return got if done and lags and all(v == 0 for v in lags) else None

        metrics = wait_until("every offset committed and every open counted", settled)
        doctor = CliRunner().invoke(cli, ["doctor", "--json", "--timeout", "10"],  # no hooks of this machine:
                                    env={**{k: v for k, v in env.items() if k.startswith("VOLUNTEER_")},
                                         "HOME": "/nonexistent-home",
                                         "VOLUNTEER_HOOK_STATE_DIR": "/nonexistent-home/hooks"})
        exit_code = worker.stop()
        yield Scenario(settings, turns, expected, rows, opened, before, after, dead, metrics,
                       orjson.loads(doctor.output), doctor.exit_code, result.output, worker.log(), exit_code, env)
    finally:
        worker.__exit__()
        _drop_database(postgres_server_url, dbname)


async def _send(settings: Settings, topic: str, items: list[tuple[bytes | None, bytes]]) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        await send_records(producer, topic, items)
    finally:
        await producer.stop()


# ----------------------------------------------------------------------------- the feedback loop


def test_stats_precision_moves_from_zero_after_page_opens(scenario: Scenario) -> None:
    before, after = scenario.before, scenario.after
    assert before.total_volunteered == len(scenario.rows) > 0
    assert before.total_used == 0 and all(a.precision == 0 for a in before.by_arm)
    used = sum(1 for row in scenario.rows if row[2] in scenario.opened)
    assert after.total_volunteered == before.total_volunteered
    assert after.total_used == used > 0
    opened_arms = {(row[5], row[7]) for row in scenario.rows if row[2] in scenario.opened}
    for arm in after.by_arm:
        assert (arm.precision > 0) == ((arm.match_arm, arm.channel) in opened_arms), arm
    assert "sent 3 page open(s)" in scenario.opened_output


def test_malformed_records_are_dead_lettered_with_a_reason(scenario: Scenario) -> None:
    by_topic = {(d.topic, d.error) for d in scenario.dead_letters}
    assert (scenario.settings.topic_turns, "invalid_json") in by_topic
    assert (scenario.settings.topic_page_opens, "missing_field") in by_topic
    assert len(scenario.dead_letters) == 2
    opens = [d for d in scenario.dead_letters if d.topic == scenario.settings.topic_page_opens]
    assert opens[0].value == '{"slug": "people/alice-example"}' and "source_id" in opens[0].message


# ----------------------------------------------------------------------------- metrics


def test_metrics_match_what_was_processed(scenario: Scenario) -> None:
    m, want = scenario.metrics, scenario.expected

    def value(name: str, **labels: str) -> float:
        return m[(name, tuple(sorted(labels.items())))]

    assert value("volunteer_turns_total") == len(scenario.turns) == want.decisions
    assert value("volunteer_turns_skipped_total") == 1  # the blank turn
    assert value("volunteer_decisions_total") == want.decisions
    assert value("volunteer_candidates_total") == want.candidates > 0
    for arm, n in want.pointers.items():
        assert value("volunteer_pointers_total", arm=arm) == n, arm
    for arm, n in want.volunteered.items():
        assert value("volunteer_volunteered_total", arm=arm) == n, arm
    assert sum(want.volunteered.values()) == len(scenario.rows)
    assert value("volunteer_gate_dropped_total") == want.gate_dropped
    assert value("volunteer_dedupe_suppressed_total") == want.suppressed > 0
    assert value("volunteer_dead_letters_total", stage="window", reason="invalid_json") == 1
    assert value("volunteer_dead_letters_total", stage="page_opens", reason="missing_field") == 1
    assert value("volunteer_events_written_total") == len(scenario.rows)
    assert value("volunteer_sink_batch_size_sum") == len(scenario.rows)
    assert value("volunteer_sink_batch_seconds_count") == value("volunteer_sink_batch_size_count") >= 1
    assert value("volunteer_window_batch_size_sum") == len(scenario.turns) + 2
    assert value("volunteer_page_opens_total") == 4  # 3 from the command, the unknown page
    assert value("volunteer_page_open_updates_total") == 2  # the repeat and the unknown page change nothing
    assert value("volunteer_sessions") == len({t.session_id for t in scenario.turns})
    live = sum(1 for line in (samples_dir() / "brain" / "pages.jsonl").read_text().splitlines()
               if line.strip() and not orjson.loads(line).get("deleted"))
    assert value("volunteer_brain_pages") == live
    assert 0 <= value("volunteer_brain_refresh_age_seconds") <= value("volunteer_brain_age_seconds") < 600
    lags = {labels: v for (name, labels), v in m.items() if name == "volunteer_consumer_lag"}
    topics = {dict(labels)["topic"] for labels in lags}
    assert topics == {scenario.settings.topic_turns, scenario.settings.topic_volunteered,
                      scenario.settings.topic_page_opens}
    streams = {dict(labels)["topic"]: dict(labels)["stream"] for labels in lags}
    assert streams == {scenario.settings.topic_turns: "turns", scenario.settings.topic_volunteered: "volunteered",
                       scenario.settings.topic_page_opens: "page_opens"}
    assert set(lags.values()) == {0}
    info = dict(next(labels for (name, labels) in m if name == "volunteer_worker_info"))
    assert info == {"app_id": scenario.settings.app_id, "broker": "tansu"}


def test_every_scraped_metric_is_documented(scenario: Scenario) -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "observability.md").read_text()
    for name, _ in scenario.metrics:
        if name.startswith(("process_", "python_")):
            continue
        assert name.startswith("volunteer_"), name
        base = name
        for suffix in ("_created", "_total", "_bucket", "_count", "_sum", "_info"):
            base = base.removesuffix(suffix)
        assert f"`{base}" in doc, f"{name} is not documented in docs/observability.md"


# ----------------------------------------------------------------------------- logs


def test_logs_are_json_lines_without_conversation_text(scenario: Scenario) -> None:
    assert scenario.exit_code == 0
    lines = scenario.log.splitlines()
    assert len(lines) > 20
    records = []
    for line in lines:
        record = orjson.loads(line)  # every line, first to last, is JSON
        assert {"ts", "level", "logger", "msg"} <= set(record), line
        records.append(record)
    messages = [r["msg"] for r in records]
    assert any("metrics on http://127.0.0.1:" in msg for msg in messages)
    assert any(msg.startswith("ready: owns partitions") for msg in messages)
    assert {r["level"] for r in records} <= {"info", "warning", "error", "critical"}  # INFO and up only
    forbidden = {MARKER, "zebra-quartz"} | {t.text for t in scenario.turns}
    for t in scenario.turns:  # names and other capitalised words, except each sentence's first
        words = [w.strip(".,?!'") for w in t.text.split()[1:]]
        forbidden |= {w for w in words if len(w) >= 5 and w[:1].isupper() and w.isalpha()}
    assert "Galewright" in forbidden and "Northwind" in forbidden
    leaked = sorted(word for word in forbidden if word in scenario.log)
    assert not leaked, f"conversation text in the log: {leaked}"


# ----------------------------------------------------------------------------- doctor


def test_doctor_is_all_ok_on_the_running_setup(scenario: Scenario) -> None:
    report = scenario.doctor
    statuses = {c["check"]: c["status"] for c in report["checks"]}
    assert report["ok"] is True and scenario.doctor_exit == 0
    assert statuses == dict.fromkeys(
        ["broker", "topics", "lag", "database", "schema", "brain", "channels", "feedback", "core"], "ok"), report
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["topics"]["data"]["partitions"] == {
        scenario.settings.topic_turns: 2, scenario.settings.topic_volunteered: 2,
        scenario.settings.topic_dlq: 2, scenario.settings.topic_page_opens: 2}
    assert checks["lag"]["data"]["total"] == 0 and checks["lag"]["data"]["members"] == 1
    assert checks["channels"]["data"]["channels"]["demo"]["count"] == len(scenario.rows)
    assert checks["feedback"]["data"]["pages_opened"] == 2
