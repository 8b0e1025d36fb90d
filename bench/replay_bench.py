"""Issue 15's replay figures: the whole ``volunteer replay`` process, the op, a 100,000-page brain.

Prints figures only; nothing is asserted. Every rate is shown as a ratio to the reference's
constants measured on the same machine class (gbrain: 11.4k turns/s in watch mode, 23k window
turns/s in the op) and, for the replay, to this code's own pure-Python build in the same run.

- **whole process**: ``taskset -c 0 volunteer replay FILE --json --brain DIR``, a cold process
  (interpreter start, imports, brain load, output included) on the corpus of ``bench/replay_corpus.py``
  (the 450 conformance watch sessions repeated under new ids; 34 copies: 15,300 sessions), once per
  build of the core this checkout has (compiled / ``VOLUNTEER_PURE_CORE=1``), best of ``--repeat``;
  both builds' ``--json`` outputs are compared byte for byte; the same with ``--unique`` texts (the
  same decisions and output, but no text or window repeats, so no memo helps); wall and CPU time;
  and the start-up alone: the same command on an empty file;
- **op**: ``volunteer_context`` over the 450 conformance op windows, window turns/s, steady state;
- **100k brain**: index build CPU seconds and memory of the synthetic 100,000-page brain of
  ``bench/core_bench.py``, and replay (``step``) turns per CPU-second on its generated sessions, each
  as a ratio to issue 15's target (``core_bench.BRAIN_TARGETS``).

    .venv/bin/python -m bench.replay_bench                 # about a minute
    .venv/bin/python -m bench.replay_bench --repeats 23 --repeat 1 --pages 20000
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.replay_corpus import BRAIN_DIR, DEFAULT_REPEATS, write_corpus

REFERENCE_WATCH = 11_400.0  # gbrain watch mode, turns/s (issue 15)
REFERENCE_OP = 23_000.0  # gbrain op, window turns/s
ROOT = Path(__file__).resolve().parent.parent


def whole_process(corpus: Path, pure: bool, repeat: int) -> tuple[float, float, str, str]:
    """Best wall time and best CPU time (user + sys) of a cold ``volunteer replay --json`` on CPU 0,
    the output's digest, the build. The CPU time is what a loaded machine changes least."""
    env = {key: value for key, value in os.environ.items() if key != "VOLUNTEER_PURE_CORE"}
    if pure:  # set only for this build: any VOLUNTEER_* variable makes replay read its settings (pydantic)
        env["VOLUNTEER_PURE_CORE"] = "1"
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    script = Path(sys.executable).with_name("volunteer")  # the executable a user runs (pipeline.entry)
    program = [str(script)] if script.exists() else [sys.executable, "-m", "pipeline"]
    cmd = [*pin, *program, "replay", str(corpus), "--json", "--brain", str(BRAIN_DIR)]
    best, best_cpu, digest = float("inf"), float("inf"), ""
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, check=True).stdout
        best = min(best, time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best_cpu = min(best_cpu, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        digest = hashlib.sha256(out).hexdigest()[:16]
    build = subprocess.run([sys.executable, "-c", "import pipeline.corebuild as c; print(c.core_build())"], env=env,
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    return best, best_cpu, digest, build


def measure(repeats: int = DEFAULT_REPEATS, repeat: int = 2, pages_n: int = 100_000) -> dict[str, Any]:
    from bench import core_bench
    from pipeline.braindir import load_brain_dir

    out: dict[str, Any] = {"load": os.getloadavg()[0], "reference_watch": REFERENCE_WATCH, "reference_op": REFERENCE_OP}
    with tempfile.TemporaryDirectory(prefix="replay-bench-") as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        turns = write_corpus(corpus, repeats)
        out["corpus"] = {"turns": turns, "sessions": 450 * repeats}
        unique = Path(tmp) / "unique.jsonl"
        write_corpus(unique, repeats, unique=True)
        runs: dict[str, dict[str, Any]] = {}
        for _ in range(repeat):  # the runs take turns, so a busy spell on the machine hits all of them
            for name, path, pure in (("default", corpus, False), ("pure", corpus, True), ("unique", unique, False)):
                seconds, cpu, digest, build = whole_process(path, pure, 1)
                run = runs.setdefault(name, {"seconds": seconds, "cpu": cpu, "digest": digest, "build": build})
                run["seconds"], run["cpu"] = min(run["seconds"], seconds), min(run["cpu"], cpu)
        for run in runs.values():
            run["per_s"], run["per_cpu_s"] = turns / run["seconds"], turns / run["cpu"]
        out["process"] = runs
        empty = Path(tmp) / "empty.jsonl"
        empty.touch()
        seconds, cpu, _digest, build = whole_process(empty, False, max(3, repeat))
        out["startup"] = {"seconds": seconds, "cpu": cpu, "build": build}
    brain = load_brain_dir(BRAIN_DIR)
    gc.freeze()
    calls, window_turns, cold, warm = core_bench.op_rates(brain)
    out["op"] = {"calls": calls, "window_turns": window_turns, "window_turns_per_s": window_turns / warm,
                 "first_pass_per_s": window_turns / cold, "build": _build_in_process()}
    pages, names = core_bench.synthetic_brain(pages_n)
    index, big = core_bench.index_figures(pages)
    gc.freeze()
    sessions = core_bench.synthetic_sessions(names, 2_000)
    syn_turns, _cold_rate, steady = core_bench.replay_rates(sessions, big)
    out["big"] = {"pages": pages_n, "build_s": index["cpu_s"], "index_mib": index["rss_mib"], "index": index,
                  "turns": syn_turns, "steady_per_s": steady,
                  "steady_per_cpu_s": core_bench.steady_per_cpu_second(sessions, big)}
    return out


def _build_in_process() -> str:
    from pipeline.corebuild import core_build

    return core_build()


def report(r: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, figure) rows: every rate with its ratio to its anchor."""
    rows = []
    default, pure, unique = r["process"]["default"], r["process"]["pure"], r["process"]["unique"]
    c = r["corpus"]
    ref = r["reference_watch"]
    for label, run in (("", default), ("", pure), (", unique texts (no memo helps)", unique)):
        rows.append((f"whole-process replay --json, {c['sessions']:,} sessions / {c['turns']:,} turns{label}, CPU 0, "
                     f"core {run['build']}",
                     f"{run['per_s']:,.0f} turns/s = {run['per_s'] / ref:.2f}x reference {ref / 1000:.1f}k "
                     f"({run['seconds']:.2f} s); CPU {run['cpu']:.2f} s = {run['cpu'] / c['turns'] * 1e6:.1f} us/turn, "
                     f"{run['per_cpu_s']:,.0f} turns/CPU-s = {run['per_cpu_s'] / ref:.2f}x"))
    start = r["startup"]
    rows.append((f"  start-up: replay of an empty file, CPU 0, core {start['build']}, best of 3",
                 f"{start['seconds']:.3f} s wall, {start['cpu']:.3f} s CPU"))
    rows.append(("  compiled vs pure, same run (CPU)", f"{default['per_cpu_s'] / pure['per_cpu_s']:.2f}x; outputs "
                 + ("identical" if default["digest"] == pure["digest"] == unique["digest"] else "DIFFER")))
    op = r["op"]
    for label, rate in (("steady (memos warm: the same windows again)", op["window_turns_per_s"]),
                        ("first pass (memos and caches empty)", op["first_pass_per_s"])):
        rows.append((f"op: volunteer_context on {op['calls']} windows, {label}, core {op['build']}",
                     f"{rate:,.0f} window turns/s = {rate / r['reference_op']:.2f}x reference "
                     f"{r['reference_op'] / 1000:.0f}k"))
    big = r["big"]
    from bench.core_bench import brain_rows

    for what, figure in brain_rows(big["index"], big["steady_per_cpu_s"]):
        rows.append((f"{big['pages']:,}-page brain: {what}", figure))
    rows.append((f"  replay through step, {big['turns']:,} turns, steady (wall)",
                 f"{big['steady_per_s']:,.0f} turns/s = {big['steady_per_s'] / r['reference_watch']:.2f}x reference"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="copies of the 450 sessions (default 34)")
    parser.add_argument("--repeat", type=int, default=2, help="whole-process runs per build, best kept (default 2)")
    parser.add_argument("--pages", type=int, default=100_000, help="pages of the synthetic brain (default 100,000)")
    args = parser.parse_args()
    r = measure(args.repeats, args.repeat, args.pages)
    print(f"load average {r['load']:.2f} at the start")
    for what, figure in report(r):
        print(f"{what:<100} {figure}")


if __name__ == "__main__":
    main()
