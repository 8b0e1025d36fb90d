"""A sweep over all cores: sessions partitioned by a stable hash, one process per partition.

Every process gets whole sessions (the hash of ``session_id`` picks the partition, so all of a
session's turns meet the same :class:`SessionState`), runs every setting of the grid on them, and
sends back integer counts, which add up to exactly what one process would have counted. The brain
is built once, before the processes start: with the ``fork`` start method (Linux) they share it
copy-on-write; elsewhere each process unpickles it once.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_module
import traceback
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import orjson

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions
from pipeline.tuning.grid import Setting
from pipeline.tuning.sweep import Progress, SweepResult, run_partition

Lines = list[tuple[int, bytes]]


class WorkerFailed(RuntimeError):
    """A sweep process crashed; the message carries its traceback or exit code."""


def default_jobs() -> int:
    """The CPUs this process may run on (affinity-aware), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def partition_of(session_id: str, jobs: int) -> int:
    """Stable across runs and processes (unlike ``hash``): CRC-32 of the UTF-8 session id."""
    return zlib.crc32(session_id.encode("utf-8", "surrogatepass")) % jobs


def _session_of(raw: bytes) -> str | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    session_id = obj.get("session_id") if isinstance(obj, dict) else None
    return session_id if isinstance(session_id, str) else None


def split_lines(lines: Iterable[bytes], jobs: int) -> list[Lines]:
    """Non-blank lines, numbered from 1, grouped by partition. Lines without a readable session id
    go to partition 0, where the Turn decoder reports them with their line number."""
    parts: list[Lines] = [[] for _ in range(jobs)]
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        session_id = _session_of(raw)
        parts[0 if session_id is None else partition_of(session_id, jobs)].append((lineno, raw))
    return parts


def _worker(index: int, lines: Lines, brain: BrainIndex, grid: Sequence[Setting], base: DecisionOptions,
            default_source: str, max_text_bytes: int, out: Any) -> None:
    """Process body: run the partition, report progress and the result (or the traceback)."""
    try:
        result = run_partition(lines, brain, grid, base, default_source=default_source,
                               max_text_bytes=max_text_bytes, progress=lambda n: out.put(("progress", index, n)))
        out.put(("done", index, result))
    except BaseException:
        out.put(("failed", index, traceback.format_exc()))


def run_sweep(
    lines: Iterable[bytes],
    brain: BrainIndex,
    grid: Sequence[Setting],
    base: DecisionOptions,
    *,
    jobs: int = 1,
    default_source: str = "default",
    max_text_bytes: int = 5_000_000,
    progress: Progress | None = None,
    on_split: Callable[[int], None] | None = None,
) -> SweepResult:
    """Every setting of ``grid`` over the transcript ``lines``, on ``jobs`` processes.

    ``on_split(turn_lines)`` is called once the input is read and split (for a progress total);
    ``progress(n)`` then reports turns replayed, summed over processes and settings.
    """
    jobs = max(1, jobs)
    parts = split_lines(lines, jobs)
    if on_split is not None:
        on_split(sum(len(p) for p in parts))
    parts = [p for p in parts if p] or [[]]
    if len(parts) == 1:
        return run_partition(parts[0], brain, grid, base, default_source=default_source,
                             max_text_bytes=max_text_bytes, progress=progress)

    methods = multiprocessing.get_all_start_methods()
    context: Any = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_worker, name=f"volunteer-sweep-{i}", daemon=True,
                        args=(i, part, brain, grid, base, default_source, max_text_bytes, out))
        for i, part in enumerate(parts)
    ]
    results: dict[int, SweepResult] = {}
    try:
        for process in processes:
            process.start()
        while len(results) < len(processes):
            try:
                message = out.get(timeout=0.5)
            except queue_module.Empty:
                _check_alive(processes, results, out, progress)
                continue
            _handle(message, results, progress)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
            process.join(timeout=5)
        out.close()
    merged = SweepResult.empty(len(grid))
    for index in sorted(results):
        merged.merge(results[index])
    return merged


def _handle(message: tuple[Any, ...], results: dict[int, SweepResult], progress: Progress | None) -> None:
    kind, index, payload = message
    if kind == "progress":
        if progress is not None:
            progress(payload)
    elif kind == "done":
        results[index] = payload
    else:
        raise WorkerFailed(f"sweep process {index} failed:\n{payload}")


def _check_alive(processes: Sequence[Any], results: dict[int, SweepResult], out: Any,
                 progress: Progress | None) -> None:
    """A process that exited without a result has crashed (killed, out of memory...)."""
    for index, process in enumerate(processes):
        if index in results or process.exitcode is None:
            continue
        try:  # its last message may still be in the pipe
            message = out.get(timeout=1.0)
        except queue_module.Empty:
            raise WorkerFailed(f"sweep process {index} exited with code {process.exitcode} "
                               "before sending its result") from None
        _handle(message, results, progress)
        return
