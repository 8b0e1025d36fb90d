#!/usr/bin/env python3
"""How long a tuning sweep takes: 5 thresholds over a 20,000-turn labelled transcript.

Generates the transcript with scripts/gen_labelled_transcript.py (deterministic), then times

- the sweep in-process (:func:`pipeline.tuning.parallel.run_sweep`: split, decode, 5 replays) with
  1 process and with one per CPU, checking that both give the same figures;
- the whole command as a user runs it (``volunteer replay FILE --brain DIR --sweep ... --json``),
  start-up and brain load included.

Prints a table of figures; nothing is asserted (machines differ). The target is under a minute on
2 cores.

    python bench/tuning_bench.py                       # sample brain, 20,000 turns
    python bench/tuning_bench.py --brain tests/fixtures/conformance/brain --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pipeline.braindir import load_brain_dir  # noqa: E402
from pipeline.core.session import DecisionOptions  # noqa: E402
from pipeline.tuning.grid import base_setting, build_grid, parse_sweeps  # noqa: E402
from pipeline.tuning.parallel import default_jobs, run_sweep  # noqa: E402
from pipeline.tuning.report import setting_rows  # noqa: E402

SWEEP = "min_confidence=0.6,0.65,0.7,0.75,0.8"


def timed(func: object, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = func()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brain", type=Path, default=ROOT / "pipeline" / "samples" / "brain")
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (the median is shown)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        transcript = Path(tmp) / "labelled.jsonl"
        subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_labelled_transcript.py"), "--brain",
                        str(args.brain), "--turns", str(args.turns), "--seed", str(args.seed), "-o", str(transcript)],
                       check=True)
        lines = transcript.read_bytes().split(b"\n")[:-1]
        brain = load_brain_dir(args.brain)
        base = DecisionOptions()
        grid = build_grid(base_setting(base), parse_sweeps([SWEEP]))
        cpus = default_jobs()
        print(f"transcript: {len(lines)} turns ({transcript.stat().st_size / 1e6:.1f} MB), brain {args.brain}, "
              f"{len(grid)} settings, {cpus} CPU(s), load average {os.getloadavg()[0]:.2f}")

        one_s, one = timed(lambda: run_sweep(lines, brain, grid, base, jobs=1), args.repeat)
        all_s, many = timed(lambda: run_sweep(lines, brain, grid, base, jobs=cpus), args.repeat)
        same = setting_rows(one, grid) == setting_rows(many, grid)  # type: ignore[arg-type]
        replays = len(lines) * len(grid)
        print(f"{'in-process sweep':<28} {'seconds':>8} {'turn replays/s':>15}")
        print(f"{'1 process':<28} {one_s:>8.2f} {replays / one_s:>15,.0f}")
        print(f"{f'{cpus} processes':<28} {all_s:>8.2f} {replays / all_s:>15,.0f}   same figures: {same}")

        command = [sys.executable, "-m", "pipeline", "replay", str(transcript), "--brain", str(args.brain),
                   "--sweep", SWEEP, "--json"]
        cli_s, proc = timed(lambda: subprocess.run(command, check=True, capture_output=True), args.repeat)
        print(f"{'volunteer replay --sweep':<28} {cli_s:>8.2f}   (whole command: start-up, brain load, {cpus} processes)")
        print("\nmin_conf  volunteered  precision  recall  F1")
        for row in setting_rows(many, grid):  # type: ignore[arg-type]
            print(f"{row['min_confidence']:<9} {row['volunteered']:>11}  {row['precision']:>9.3f}  "
                  f"{row['recall']:>6.3f}  {row['f1']:.3f}")
        del proc
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
