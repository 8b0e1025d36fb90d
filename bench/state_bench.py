"""Per-session state: bytes and memory per active session, and the table's recovery for 100,000.

1. Table values: the conformance watch sessions (and generated sessions on a synthetic brain) are
   replayed through the core and their final table values (header + state) measured; the decoded
   state an active session keeps in the window agent's cache is measured with tracemalloc.
2. Recovery: the changelog of a worker's session table is filled with N session values (copies of
   the conformance ones, each in the partition the window agent would write it to), then a worker
   is started. Time from start to "ready" (recovery included) and its resident memory are compared
   with a worker started the same way on an empty table; the difference is the cost of the N
   sessions. The worker's ready line says how many sessions it recovered.
3. Sealing: µs to encode and decode each conformance session's table value, plain and sealed with
   AES-256-GCM (pipeline/agents/statecrypt.py), the per-turn cost of keeping the changelog private.

    .venv/bin/python -m bench.state_bench [--sessions 100000]
    .venv/bin/python -m bench.state_bench --seal-only      # part 3 alone, a few seconds
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path

from aiokafka.admin import NewTopic
from aiokafka.partitioner import murmur2

from bench.common import load_note, loadavg, rss_bytes
from bench.core_bench import CONFORMANCE, Session, conformance_sessions, synthetic_brain, synthetic_sessions
from bench.pipeline_bench import Workers, settings_for
from pipeline.agents.session_table import SessionRecord
from pipeline.agents.statecrypt import StateCipher, new_key_text, parse_key
from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.core.session import SessionState, step
from pipeline.embedded.postgres import EmbeddedPostgres
from pipeline.embedded.tansu import EmbeddedBroker
from pipeline.settings import Settings
from sinks.schema import migrate
from topics.clients import make_admin, make_producer
from topics.definitions import ensure_topics

NOW_MS = 1_780_000_000_000


@dataclass(frozen=True)
class StateResult:
    conformance_bytes_mean: float
    conformance_bytes_p99: float
    synthetic_bytes_mean: float
    synthetic_bytes_p99: float
    decoded_bytes_mean: float
    sessions: int
    recovered: int
    changelog_bytes: int
    recovery_s: float
    ready_empty_s: float
    ready_full_s: float
    rss_per_session: float
    load: float


def final_records(sessions: list[Session], brain: BrainIndex) -> list[bytes]:
    values = []
    for _, options, source, turns in sessions:
        state = SessionState()
        for i, (role, text) in enumerate(turns, 1):
            step(state, role, text, brain, source_id=source, options=options, now_ms=NOW_MS + i)
        values.append(SessionRecord(state, 0, len(turns), NOW_MS).to_bytes())
    return values


def decoded_size(values: list[bytes]) -> float:
    """Mean bytes Python allocates for a decoded SessionRecord (the window agent's LRU entry)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = [SessionRecord.from_bytes(v) for v in values]
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / max(1, len(kept))


@dataclass(frozen=True)
class SealCost:
    """Mean µs per table value: encode and decode, plain and sealed; and the encoding of the whole state
    (every window turn's part built again), which is what each save cost before a turn kept its part
    (``_WindowTurn.encoded``, issue 28 part 3)."""

    encode_whole_us: float
    encode_plain_us: float
    encode_sealed_us: float
    decode_plain_us: float
    decode_sealed_us: float
    value_bytes_mean: float


def seal_cost(values: list[bytes], rounds: int = 20) -> SealCost:
    """Encode and decode every value ``rounds`` times each way (the best of three runs per figure), in
    µs of the process's CPU: on a loaded machine the wall clock mostly measures the waits for a core."""
    cipher = StateCipher(parse_key(new_key_text()))
    records = [SessionRecord.from_bytes(v) for v in values]
    keys = [f"seal-session-{i}".encode() for i in range(len(records))]
    sealed = [r.to_bytes(cipher, k) for r, k in zip(records, keys, strict=True)]
    count = rounds * len(records)

    def best(run: object) -> float:
        assert callable(run)
        times = []
        for _ in range(3):
            started = time.process_time()
            for _ in range(rounds):
                run()
            times.append(time.process_time() - started)
        return min(times) / count * 1e6

    def whole(record: SessionRecord) -> bytes:
        for turn in record.state.window:
            turn.encoded = None  # as if the turn had never been saved: its part is built again
        return record.to_bytes()

    return SealCost(
        encode_whole_us=best(lambda: [whole(r) for r in records]),
        encode_plain_us=best(lambda: [r.to_bytes() for r in records]),
        encode_sealed_us=best(lambda: [r.to_bytes(cipher, k) for r, k in zip(records, keys, strict=True)]),
        decode_plain_us=best(lambda: [SessionRecord.from_bytes(v) for v in values]),
        decode_sealed_us=best(lambda: [SessionRecord.from_bytes(v, cipher, k)
                                       for v, k in zip(sealed, keys, strict=True)]),
        value_bytes_mean=statistics.mean(len(v) for v in sealed),
    )


def print_seal_cost(c: SealCost) -> None:
    print(f"per-turn state write: the whole state encoded {c.encode_whole_us:.1f} µs, with each window turn's part "
          f"kept {c.encode_plain_us:.1f} µs (plain)")
    print(f"sealing (AES-256-GCM) per table value of {c.value_bytes_mean:.0f} B: encode {c.encode_plain_us:.1f} -> "
          f"{c.encode_sealed_us:.1f} µs, decode {c.decode_plain_us:.1f} -> {c.decode_sealed_us:.1f} µs  "
          f"[{load_note()}]")


async def fill_changelog(settings: Settings, topic: str, partitions: int, values: list[bytes], total: int) -> int:
    admin = make_admin(settings)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    producer = make_producer(settings, linger_ms=20)
    await producer.start()
    size = 0
    try:
        pending = []
        for i in range(total):
            key = f"recovery-session-{i:06d}".encode()
            partition = (murmur2(key) & 0x7FFFFFFF) % partitions
            value = values[i % len(values)]
            size += len(key) + len(value)
            pending.append(await producer.send(topic, value, key=key, partition=partition))
            if len(pending) >= 20_000:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return size


def start_worker(settings: Settings, workdir: Path, partitions: int) -> tuple[float, int, int]:
    """Start one worker; (seconds to ready, RSS at ready, sessions it reported)."""
    started = time.monotonic()
    group = Workers(settings, 1, workdir)
    try:
        group.wait_ready(partitions, timeout=300)
        ready = time.monotonic() - started - 0.5  # wait_ready sleeps 0.5 s after the ready line
        rss = rss_bytes(group.procs[0].pid)
        line = [ln for ln in group.logs[0].read_text(errors="replace").splitlines() if "sessions in the table" in ln][-1]
        sessions = int(line.rsplit("(", 1)[1].split()[0])
    finally:
        group.stop()
    return ready, rss, sessions


def measure(broker: EmbeddedBroker, pg: EmbeddedPostgres, workdir: Path, total: int = 100_000,
            partitions: int = 8, synthetic_pages: int = 100_000) -> StateResult:
    load = loadavg()
    brain = load_brain_dir(CONFORMANCE / "brain")
    values = final_records(conformance_sessions(), brain)
    pages, names = synthetic_brain(synthetic_pages)
    syn_values = final_records(synthetic_sessions(names, 1000), BrainIndex.build(pages))
    del pages, names

    empty = settings_for(broker, pg.url, "state-empty", partitions)
    asyncio.run(ensure_topics(empty))
    ready_empty, rss_empty, _ = start_worker(empty, workdir, partitions)

    full = settings_for(broker, pg.url, "state-full", partitions)
    asyncio.run(ensure_topics(full))
    size = asyncio.run(fill_changelog(full, f"{full.app_id}-sessions-changelog", partitions, values, total))
    ready_full, rss_full, recovered = start_worker(full, workdir, partitions)

    def p99(xs: list[bytes]) -> float:
        return float(sorted(len(x) for x in xs)[int(0.99 * (len(xs) - 1))])

    return StateResult(
        conformance_bytes_mean=statistics.mean(len(v) for v in values), conformance_bytes_p99=p99(values),
        synthetic_bytes_mean=statistics.mean(len(v) for v in syn_values), synthetic_bytes_p99=p99(syn_values),
        decoded_bytes_mean=decoded_size(values), sessions=total, recovered=recovered, changelog_bytes=size,
        recovery_s=ready_full - ready_empty, ready_empty_s=ready_empty, ready_full_s=ready_full,
        rss_per_session=(rss_full - rss_empty) / total, load=load)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--seal-only", action="store_true", help="Only the per-turn encoding and sealing costs (part 3), a few seconds.")
    args = parser.parse_args()
    print(f"state bench: {load_note()}")
    print_seal_cost(seal_cost(final_records(conformance_sessions(), load_brain_dir(CONFORMANCE / "brain"))))
    if args.seal_only:
        return
    with tempfile.TemporaryDirectory(prefix="state-bench-") as tmp, EmbeddedBroker() as broker, \
            EmbeddedPostgres() as pg:
        migrate(pg.url)
        r = measure(broker, pg, Path(tmp), args.sessions, args.partitions)
    print(f"table value per session: conformance mean {r.conformance_bytes_mean:.0f} B (p99 "
          f"{r.conformance_bytes_p99:.0f}), synthetic 100k-page brain mean {r.synthetic_bytes_mean:.0f} B (p99 "
          f"{r.synthetic_bytes_p99:.0f}); decoded while active {r.decoded_bytes_mean:.0f} B")
    print(f"recovery of {r.sessions:,} sessions ({r.changelog_bytes / 2**20:.0f} MiB of changelog, "
          f"{r.recovered:,} recovered): ready after {r.ready_full_s:.2f} s vs {r.ready_empty_s:.2f} s empty = "
          f"{r.recovery_s:.2f} s for the sessions; worker RSS +{r.rss_per_session:.0f} B per session  [{load_note()}]")


if __name__ == "__main__":
    main()
