"""Worker metrics without a worker: batch hooks add up, names and labels are as documented, the port rule."""

from __future__ import annotations

import socket
import urllib.request

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipeline.agents.batch_types import BatchOutput, OpensResult, SinkResult
from pipeline.core.tally import DecisionTally
from pipeline.settings import load_settings
from pipeline.worker_metrics import MetricsPortError, WorkerMetrics, serve_metrics_for


def samples(metrics: WorkerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    out = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def letter(code: str) -> tuple[bytes, bytes]:
    return b"k", orjson.dumps({"error": code, "message": "m"})


def test_batch_hooks_accumulate_into_counters_and_histograms() -> None:
    m = WorkerMetrics()
    first = BatchOutput(dead=[letter("invalid_json"), letter("invalid_json")])
    first.tally.record(7, [], (), [])
    second = BatchOutput(dead=[letter("key_mismatch"), (None, b"not json")])
    second.tally.candidates = 5
    second.tally.decisions = 2
    second.tally.pointers["alias"] = 3
    second.tally.volunteered["alias"] = 2
    second.tally.suppressed = 1
    m.window_batch(10, first, 0.002)
    m.window_batch(4, second, 0.02)
    m.sink_batch(6, SinkResult(inserted=5, dead=[letter("invalid_volunteered")]), 0.004)
    m.page_opens_batch(OpensResult(opens=3, updated=2, dead_reasons=["missing_field"]))
    got = samples(m)
    assert got[("volunteer_decisions_total", ())] == 3
    assert got[("volunteer_candidates_total", ())] == 12
    assert got[("volunteer_pointers_total", (("arm", "alias"),))] == 3
    assert got[("volunteer_pointers_total", (("arm", "title"),))] == 0
    assert got[("volunteer_volunteered_total", (("arm", "alias"),))] == 2
    assert got[("volunteer_dedupe_suppressed_total", ())] == 1
    dead = {labels: v for (name, labels), v in got.items() if name == "volunteer_dead_letters_total"}
    assert dead == {
        (("reason", "invalid_json"), ("stage", "window")): 2,
        (("reason", "key_mismatch"), ("stage", "window")): 1,
        (("reason", "unknown"), ("stage", "window")): 1,
        (("reason", "invalid_volunteered"), ("stage", "sink")): 1,
        (("reason", "missing_field"), ("stage", "page_opens")): 1,
    }
    assert got[("volunteer_window_batch_size_count", ())] == 2
    assert got[("volunteer_window_batch_size_sum", ())] == 14
    assert got[("volunteer_window_batch_seconds_bucket", (("le", "0.0025"),))] == 1
    assert got[("volunteer_sink_batch_size_sum", ())] == 6
    assert got[("volunteer_page_opens_total", ())] == 3
    assert got[("volunteer_page_open_updates_total", ())] == 2
    # nothing app-bound is reported before bind(): no made-up zeros for sessions or lag
    assert not any(name.startswith(("volunteer_sessions", "volunteer_consumer_lag")) for name, _ in got)


def test_every_metric_is_prefixed_and_documented() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "observability.md").read_text()
    names = {name for name, _ in samples(WorkerMetrics())}
    ours = {n for n in names if not n.startswith("process_")}
    assert ours and all(n.startswith("volunteer_") for n in ours)
    for name in ours:
        base = name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        base = base.removesuffix("_created")
        assert f"`{base}" in doc, f"{base} is not documented in docs/observability.md"


def test_tally_add_folds_everything() -> None:
    a, b = DecisionTally(), DecisionTally()
    b.decisions, b.candidates, b.suppressed, b.gate_dropped = 1, 2, 3, 4
    b.pointers["title"] = 5
    b.volunteered["title"] = 1
    a.add(b)
    a.add(b)
    assert (a.decisions, a.candidates, a.suppressed, a.gate_dropped) == (2, 4, 6, 8)
    assert a.pointers["title"] == 10 and a.volunteered["title"] == 2


def busy_port() -> tuple[socket.socket, int]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    return sock, int(sock.getsockname()[1])


def test_port_rule_off_free_busy_embedded_and_busy_kafka() -> None:
    """Off at 0; the configured port when it can be bound; another one on the embedded broker when it
    cannot (several workers on one host, possibly started together); an error against Kafka."""
    assert serve_metrics_for(WorkerMetrics(), load_settings(metrics_port=0)) is None
    sock, port = busy_port()
    served: list[WorkerMetrics] = []
    try:
        embedded = WorkerMetrics()
        served.append(embedded)
        bound = serve_metrics_for(embedded, load_settings(broker="tansu://127.0.0.1:1", metrics_port=port))
        assert bound is not None and bound != port and embedded.port == bound
        with pytest.raises(MetricsPortError, match=f"metrics port {port} .* in use"):
            serve_metrics_for(WorkerMetrics(), load_settings(broker="kafka://127.0.0.1:9092", metrics_port=port))
    finally:
        sock.close()
    kafka = WorkerMetrics()
    served.append(kafka)
    assert serve_metrics_for(kafka, load_settings(broker="kafka://127.0.0.1:9092", metrics_port=port)) == port
    for m in served:
        m.stop()


def test_serve_answers_on_the_chosen_port_and_stops() -> None:
    m = WorkerMetrics()
    port = m.serve("127.0.0.1", 0)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "volunteer_decisions_total 0.0" in body
    finally:
        m.stop()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_hook_requests_count_by_outcome_from_zero_and_sum_pages() -> None:
    from pipeline.worker_metrics import HOOK_OUTCOMES

    m = WorkerMetrics()
    before = samples(m)
    # every outcome exists at 0 before the first request, so increase() sees the first one
    assert {labels: v for (name, labels), v in before.items() if name == "volunteer_hook_requests_total"} == {
        (("outcome", o),): 0 for o in HOOK_OUTCOMES}
    m.hook_request("answered", 3)
    m.hook_request("answered", 2)
    m.hook_request("empty", 0)
    m.hook_request("timeout", 0)
    got = samples(m)
    assert got[("volunteer_hook_requests_total", (("outcome", "answered"),))] == 2
    assert got[("volunteer_hook_requests_total", (("outcome", "empty"),))] == 1
    assert got[("volunteer_hook_requests_total", (("outcome", "timeout"),))] == 1
    assert got[("volunteer_hook_requests_total", (("outcome", "error"),))] == 0
    assert got[("volunteer_hook_pages_total", ())] == 5


def test_answer_outcome_names_each_waited_answer() -> None:
    from pipeline.agents.answers import answer_outcome

    assert answer_outcome({"status": "ok", "pages": [{"slug": "a"}, {"slug": "b"}]}) == ("answered", 2)
    assert answer_outcome({"status": "ok", "pages": []}) == ("empty", 0)
    assert answer_outcome({"status": "timeout"}) == ("timeout", 0)
    assert answer_outcome({"status": "duplicate", "turn": 3, "last_turn": 4}) == ("duplicate", 0)


def test_db_retries_are_read_live_from_the_watched_writers() -> None:
    from types import SimpleNamespace

    m = WorkerMetrics()
    events, opens_a, opens_b = SimpleNamespace(failures=0), SimpleNamespace(failures=1), SimpleNamespace(failures=2)
    m.watch_writer("events", events)
    m.watch_writer("page_opens", opens_a)
    m.watch_writer("page_opens", opens_b)  # two page-opens agents: one series, summed
    assert samples(m)[("volunteer_db_retries_total", (("writer", "events"),))] == 0
    events.failures = 4  # a batch still retrying: seen at the next scrape, before it commits
    got = samples(m)
    assert got[("volunteer_db_retries_total", (("writer", "events"),))] == 4
    assert got[("volunteer_db_retries_total", (("writer", "page_opens"),))] == 3
