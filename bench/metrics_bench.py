"""What observability costs: the decision tally on the hot path, the per-batch hooks, a scrape, a log line.

Prints figures only; nothing is asserted. One process, one core.

    .venv/bin/python bench/metrics_bench.py
    .venv/bin/python bench/metrics_bench.py --repeats 7

Figures (see docs/observability.md, "Cost"):
- steady-state replay of the 450 conformance watch sessions through ``step``, with and without a
  :class:`DecisionTally` (alternating runs, best of ``--repeats``), and the difference per turn;
- ``WorkerMetrics.window_batch`` + ``sink_batch`` per batch (what the agents call), in microseconds;
- one ``/metrics`` exposition of an unbound registry (what a scrape costs the worker, minus the
  per-partition lag lines);
- one JSON log line through the configured handler (to a null stream).
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402

from pipeline.agents.batch_types import BatchOutput, SinkResult  # noqa: E402
from pipeline.braindir import load_brain_dir  # noqa: E402
from pipeline.core.brain import BrainIndex  # noqa: E402
from pipeline.core.session import DecisionOptions, SessionState, parse_watch_line, step  # noqa: E402
from pipeline.core.tally import DecisionTally  # noqa: E402
from pipeline.logging_setup import configure_logging  # noqa: E402
from pipeline.worker_metrics import WorkerMetrics  # noqa: E402

CONFORMANCE = ROOT / "tests" / "fixtures" / "conformance"
Session = tuple[DecisionOptions, str, list[tuple[str, str]]]


def sessions() -> list[Session]:
    out = []
    for line in (CONFORMANCE / "cases-watch.jsonl").read_bytes().splitlines():
        case = orjson.loads(line)
        flags = case.get("flags") or {}
        opts = DecisionOptions(window_turns=flags.get("window_turns", 4), max_pages=flags.get("max_pages"),
                               min_confidence=flags.get("min_confidence"),
                               lexical_arms=flags.get("lexical_arms", True))
        turns = [p for p in (parse_watch_line(raw) for raw in case["lines"]) if p is not None]
        out.append((opts, flags.get("source", "default"), turns))
    return out


def replay(all_sessions: list[Session], brain: BrainIndex, tally: DecisionTally | None) -> tuple[int, float]:
    turns = 0
    started = time.perf_counter()
    for opts, source, lines in all_sessions:
        state = SessionState()
        for role, text in lines:
            step(state, role, text, brain, source_id=source, options=opts, tally=tally)
            turns += 1
    return turns, time.perf_counter() - started


def per_call_us(fn: object, n: int) -> float:
    call = fn  # type: ignore[assignment]
    started = time.perf_counter()
    for _ in range(n):
        call()  # type: ignore[operator]
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="alternating replay runs per variant (default 5)")
    args = parser.parse_args()

    brain = load_brain_dir(CONFORMANCE / "brain")
    corpus = sessions()
    replay(corpus, brain, None)  # warm the extraction caches: steady state, as in a running worker
    without: list[float] = []
    with_tally: list[float] = []
    turns = 0
    for _ in range(args.repeats):
        turns, seconds = replay(corpus, brain, None)
        without.append(seconds)
        turns, seconds = replay(corpus, brain, DecisionTally())
        with_tally.append(seconds)
    best_without, best_with = min(without), min(with_tally)
    print(f"replay, {turns} turns of {len(corpus)} sessions (best of {args.repeats}):")
    print(f"  without tally  {turns / best_without:10,.0f} turns/s  {best_without / turns * 1e6:6.2f} us/turn")
    print(f"  with tally     {turns / best_with:10,.0f} turns/s  {best_with / turns * 1e6:6.2f} us/turn")
    print(f"  difference     {(best_with - best_without) / turns * 1e6:+6.2f} us/turn "
          f"({(best_with / best_without - 1) * 100:+.1f}%)")

    metrics = WorkerMetrics()
    out = BatchOutput()
    out.tally.decisions, out.tally.candidates = 200, 1500
    out.tally.pointers["title"], out.tally.volunteered["title"] = 300, 120
    sink = SinkResult(inserted=120, events=120)
    hooks = per_call_us(lambda: (metrics.window_batch(200, out, 0.01), metrics.sink_batch(120, sink, 0.004)),
                        20_000)
    print(f"batch hooks (window + sink), per batch: {hooks:.1f} us")
    scrape = per_call_us(lambda: generate_latest(metrics.registry), 500)
    print(f"one /metrics exposition (unbound registry): {scrape:.0f} us")

    sink_stream = io.StringIO()
    configure_logging("json", "info", stream=sink_stream)
    log = logging.getLogger("bench")
    line = per_call_us(lambda: log.info("progress: %d turns", 5, extra={"session_id": "s1"}), 20_000)
    print(f"one JSON log line: {line:.1f} us")


if __name__ == "__main__":
    main()
