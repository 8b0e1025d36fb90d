"""A real Prometheus scraping a real worker: the metrics move, and the shipped alert rules fire.

One scenario (a module fixture) on the embedded broker and PostgreSQL:

1. a worker with its hook endpoint and metrics port, and the ``prometheus`` binary scraping it every
   second with the shipped ``compose/alerts.yml`` (only ``for:`` shortened to 0 s; the expressions
   are the shipped ones), evaluated every second;
2. traffic once Prometheus has seen the idle worker: the sample transcript and a malformed turn on
   ``turns``, and hook requests through the hook's own signed client;
3. an outage: the worker's database refuses connections while more turns arrive, so the sink
   retries; then the database comes back and every row is stored.

The tests ask Prometheus only (``/api/v1/query``, ``/api/v1/alerts``), never the worker. Skipped
only when no ``prometheus`` binary is installed; a failing scrape fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from psycopg import sql

from pipeline.cli.demo_cmd import sample_turns, samples_dir
from pipeline.hook.protocol import TURNS_PATH
from pipeline.settings import Settings
from sinks.db import with_database
from tests.integration.hook.conftest import Worker, free_port, signed_post
from tests.integration.observability.test_worker_observability import expected_tally
from tests.integration.stream.harness import run, table_rows
from tests.services.broker import new_names, settings_for
from tests.services.postgres import _admin, _create_database, _drop_database
from topics.clients import make_producer
from topics.definitions import ensure_topics
from topics.io import send_records

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
ALERTS = ROOT / "compose" / "alerts.yml"
PROMETHEUS = shutil.which("prometheus")
DUMP_ENV = "VOLUNTEER_PROMETHEUS_DUMP"
"""When set, the scenario also writes the dashboard's panels over the run (``query_range``) to this
JSON file: the data of the picture in docs/observability.md (``python -m bench.dashboard_picture``)."""


class Prometheus:
    """A ``prometheus`` process on a free loopback port, and its HTTP API."""

    def __init__(self, workdir: Path, metrics_port: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        rules = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule["for"] = "0s"  # the shipped expression, without the wait
        (workdir / "alerts.yml").write_text(yaml.safe_dump(rules), encoding="utf-8")
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(workdir / "alerts.yml")],
            "scrape_configs": [{"job_name": "volunteer-worker",
                                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        self.log_path = workdir / "prometheus.log"
        assert PROMETHEUS is not None
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={workdir / 'prometheus.yml'}",
                 f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}" if params else self.url + path
        with urllib.request.urlopen(url, timeout=10) as response:
            body = orjson.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"prometheus did not start:\n{self.log()[-3000:]}")
            time.sleep(0.2)

    def value(self, query: str) -> float | None:
        """The single value of an instant query, or None when it returns nothing."""
        result = self.get("/api/v1/query", query=query)["result"]
        assert len(result) <= 1, (query, result)
        return float(result[0]["value"][1]) if result else None

    def until(self, what: str, query: str, ok: Callable[[float], bool], timeout: float = 30) -> float:
        deadline = time.monotonic() + timeout
        while True:
            value = self.value(query)
            if value is not None and ok(value):
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: {query} = {value} after {timeout}s")
            time.sleep(0.25)

    def firing(self) -> dict[str, list[dict[str, str]]]:
        """The labels of every firing alert, by alert name."""
        out: dict[str, list[dict[str, str]]] = {}
        for alert in self.get("/api/v1/alerts")["alerts"]:
            if alert["state"] == "firing":
                out.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return out

    def wait_firing(self, name: str, timeout: float = 30) -> list[dict[str, str]]:
        deadline = time.monotonic() + timeout
        while name not in (firing := self.firing()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} not firing after {timeout}s; firing: {sorted(firing)}")
            time.sleep(0.25)
        return firing[name]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Run:
    """What the scenario saw through Prometheus."""

    values: dict[str, float | None] = field(default_factory=dict)
    firing_before: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    firing: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    outage_firing: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    hook_answers: list[dict[str, Any]] = field(default_factory=list)
    rows_before_outage: int = 0
    rows_after_outage: int = 0
    rows_expected_after: int = 0
    target_health: str = ""


async def _send(settings: Settings, items: list[tuple[bytes | None, bytes]]) -> None:
    producer = make_producer(settings)
    await producer.start()
    try:
        await send_records(producer, settings.topic_turns, items)
    finally:
        await producer.stop()


def wait_rows(database_url: str, at_least: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while (n := len(table_rows(database_url))) < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"{n} rows after {timeout}s, expected at least {at_least}")
        time.sleep(0.2)
    return n


def set_connections(server_url: str, dbname: str, allowed: bool) -> None:
    """Let the database take connections or not; refusing also ends the open ones (an outage)."""
    with _admin(server_url) as conn:
        conn.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
            sql.Identifier(dbname), sql.SQL("true" if allowed else "false")))
        if not allowed:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,))


def hook_turn(worker: Worker, session_id: str, turn: int, text: str) -> dict[str, Any]:
    assert worker.state_dir is not None
    body = {"session_id": session_id, "channel": "claude-code", "wait_turn": turn, "wait_ms": 10_000,
            "turns": [{"role": "user", "text": text, "turn": turn}]}
    return signed_post(worker.url, TURNS_PATH, body, worker.state_dir)


def dump_dashboard(prom: Prometheus, start: float, path: Path) -> None:
    """Every dashboard panel's queries over the run, for the picture (``python -m bench.dashboard_picture``)."""
    dashboard = orjson.loads((ROOT / "compose" / "grafana" / "volunteer-dashboard.json").read_bytes())
    panels = []
    for panel in dashboard["panels"]:
        targets = []
        for target in panel.get("targets", []):
            # Grafana's $__rate_interval: four scrape intervals (1 s here), at least the step plus one
            expr = target["expr"].replace("$__rate_interval", "5s").replace("$__range", "2m")
            data = prom.get("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{time.time():.3f}",
                            step="1")
            targets.append({"expr": target["expr"], "legend": target.get("legendFormat", ""),
                            "result": data["result"]})
        panels.append({"title": panel["title"], "unit": panel.get("fieldConfig", {}).get("defaults", {})
                       .get("unit", ""), "targets": targets})
    path.write_bytes(orjson.dumps({"start": start, "panels": panels}, option=orjson.OPT_INDENT_2))


@pytest.fixture(scope="module")
def scenario(module_broker_url: str, postgres_server_url: str, _migrated_template: str,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    if PROMETHEUS is None:
        pytest.skip("no prometheus binary on PATH (Debian: apt-get install prometheus; scripts/setup does it)")
    dbname = _create_database(postgres_server_url, template=_migrated_template)
    database_url = with_database(postgres_server_url, dbname)
    settings = settings_for(module_broker_url, new_names(), database_url=database_url, topic_partitions=2)
    run(ensure_topics(settings))
    tmp = tmp_path_factory.mktemp("prometheus")
    metrics_port = free_port()
    worker = Worker(settings, tmp / "worker.log", tmp / "data", env_extra={"VOLUNTEER_METRICS_PORT": str(metrics_port)})
    prom: Prometheus | None = None
    out = Run()
    try:
        worker.start()
        prom = Prometheus(tmp, metrics_port)
        worker.wait_ready()
        prom.wait_ready()
        started = time.time()
        # Prometheus must see the idle worker first: increase() needs a sample from before the traffic.
        prom.until("two scrapes of the idle worker", 'count_over_time(up{job="volunteer-worker"}[1m])',
                   lambda v: v >= 2)
        out.firing_before = prom.firing()

        turns = sample_turns(samples_dir() / "transcript.jsonl", int(time.time() * 1000))
        items: list[tuple[bytes | None, bytes]] = [(t.session_id.encode(), t.to_json()) for t in turns]
        items.append((b"broken", b'{"session_id": "broken", "role": "user", "text": "unterminated'))
        run(_send(settings, items))
        out.hook_answers = [hook_turn(worker, "prom-hook", 1, "Is Alice Example from Northwind coming?"),
                            hook_turn(worker, "prom-hook", 2, "And Ronan Galewright with the Kiteline roadmap?")]
        pages = sum(expected_tally(turns, samples_dir() / "brain").volunteered.values())
        out.rows_before_outage = wait_rows(database_url, pages)

        queries = {
            "up": 'up{job="volunteer-worker"}',
            "turns": "sum(increase(volunteer_turns_total[1m]))",
            "volunteered": "sum(increase(volunteer_volunteered_total[1m]))",
            "hook_answered": 'sum(increase(volunteer_hook_requests_total{outcome="answered"}[1m]))',
            "hook_pages": "sum(increase(volunteer_hook_pages_total[1m]))",
            "lag_series": 'count(volunteer_consumer_lag{stream="turns"})',
        }
        prom.until("turns counted", queries["turns"], lambda v: v > 0)
        prom.until("hook answers counted", queries["hook_pages"], lambda v: v > 0)
        prom.until("the lag of turns back to 0", 'sum(volunteer_consumer_lag{stream="turns"})', lambda v: v == 0)
        out.values = {name: prom.value(q) for name, q in queries.items()}
        prom.wait_firing("VolunteerDeadLetters")
        out.firing = prom.firing()
        targets = prom.get("/api/v1/targets")["activeTargets"]
        out.target_health = ",".join(t["health"] for t in targets)

        # the outage: turns keep coming, the sink cannot store them and retries
        set_connections(postgres_server_url, dbname, allowed=False)
        late: list[tuple[bytes | None, bytes]] = [  # the same conversations again, as new sessions
            (f"late-{t.session_id}".encode(), orjson.dumps({**orjson.loads(t.to_json()),
                                                             "session_id": f"late-{t.session_id}"}))
            for t in sample_turns(samples_dir() / "transcript.jsonl", int(time.time() * 1000))]
        run(_send(settings, late))
        prom.wait_firing("VolunteerDatabaseRetrying")
        out.values["volunteered_lag_peak"] = prom.until(
            "volunteered records waiting for the database",
            'max_over_time(sum(volunteer_consumer_lag{stream="volunteered"})[1m:1s])', lambda v: v > 0)
        out.outage_firing = prom.firing()
        set_connections(postgres_server_url, dbname, allowed=True)
        out.rows_expected_after = 2 * pages
        out.rows_after_outage = wait_rows(database_url, out.rows_expected_after)
        out.values["db_retries"] = prom.value("sum(increase(volunteer_db_retries_total[2m]))")
        dump = os.environ.get(DUMP_ENV)
        if dump:
            time.sleep(3)  # the recovery in the picture
            dump_dashboard(prom, started, Path(dump))
        yield out
    finally:
        set_connections(postgres_server_url, dbname, allowed=True)
        worker.stop()
        if prom is not None:
            prom.stop()
        _drop_database(postgres_server_url, dbname)


def test_prometheus_scrapes_the_worker(scenario: Run) -> None:
    assert scenario.values["up"] == 1
    assert scenario.target_health == "up"


def test_throughput_volunteering_and_lag_move_in_prometheus(scenario: Run) -> None:
    assert (scenario.values["turns"] or 0) > 0
    assert (scenario.values["volunteered"] or 0) > 0
    assert (scenario.values["lag_series"] or 0) >= 1  # the turns partitions this worker owns
    assert (scenario.values["volunteered_lag_peak"] or 0) > 0  # records waited during the outage


def test_hook_answers_are_counted_with_their_pages(scenario: Run) -> None:
    answered = [a for a in scenario.hook_answers if a["status"] == "ok" and a["pages"]]
    assert answered, scenario.hook_answers
    assert (scenario.values["hook_answered"] or 0) >= len(answered) - 0.5  # increase() extrapolates
    assert (scenario.values["hook_pages"] or 0) > 0


def test_no_alert_fires_on_an_idle_healthy_worker(scenario: Run) -> None:
    assert scenario.firing_before == {}


def test_a_dead_letter_fires_its_alert(scenario: Run) -> None:
    labels = scenario.firing["VolunteerDeadLetters"]
    assert {(a["stage"], a["reason"]) for a in labels} == {("window", "invalid_json")}
    assert "VolunteerDatabaseRetrying" not in scenario.firing


def test_a_database_outage_fires_the_retry_alert_and_loses_nothing(scenario: Run) -> None:
    labels = scenario.outage_firing["VolunteerDatabaseRetrying"]
    assert [a["writer"] for a in labels] == ["events"]
    assert (scenario.values["db_retries"] or 0) > 0
    assert scenario.rows_after_outage == scenario.rows_expected_after
