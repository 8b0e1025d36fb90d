"""Issue 27's seeded fault campaign: ``python -m bench.campaign --runs N --seed S``.

Each run starts its own embedded broker, PostgreSQL cluster and 1-3 workers under a CPU load that
keeps the run-queue at about twice the cores, streams a seeded workload of many sessions, applies a
seeded schedule of faults (SIGKILL, a worker added, SIGSTOP beyond the session timeout, the broker
frozen, PostgreSQL restarted, PostgreSQL slow), calls the real hook throughout, and has the
independent verifier judge it (tests/reliability/campaign.py). A failed run prints its seed;
``--seed S --runs 1`` replays that run's plan. Prints figures; the exit status is 1 if any run failed.

    .venv/bin/python -m bench.campaign --runs 5 --seed 27           # about five minutes
    .venv/bin/python -m bench.campaign --runs 200 --seed 2027       # hours
    .venv/bin/python -m bench.campaign --seed 123456 --runs 1       # replay one failed run
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

from tests.reliability.campaign import CampaignFigures, RunResult, run_campaign


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the run's own clean-up stops its workers, broker, PostgreSQL and load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.campaign", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs to make (1: the run of --seed itself)")
    parser.add_argument("--seed", type=int, default=27, help="the campaign's seed (or, with --runs 1, the run's)")
    parser.add_argument("--short", action="store_true", help="the short runs of the default suite (10-14 s, 2 faults)")
    parser.add_argument("--no-load", action="store_true", help="without the CPU load generator")
    parser.add_argument("--keep-logs", type=Path, default=None, help="write the worker logs of failed runs here")
    parser.add_argument("--all-logs", action="store_true",
                        help="with --keep-logs: keep every run's worker logs, not only failed ones (a replay's)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    done = CampaignFigures()  # the runs finished so far, printed also when the campaign is stopped

    def progress(index: int, result: RunResult) -> None:
        done.results.append(result)
        print(f"[{index + 1}/{args.runs}] {result.render()}", flush=True)

    signal.signal(signal.SIGTERM, _interrupt)  # a stopped campaign leaves no busy loop or broker behind
    try:
        figures = run_campaign(args.seed, args.runs, short=args.short, load=not args.no_load, keep=args.keep_logs,
                               keep_all=args.all_logs, progress=progress)
    except KeyboardInterrupt:
        print(f"campaign: stopped after {len(done.results)} of {args.runs} runs", file=sys.stderr)
        if done.results:
            print(done.render())
        return 130
    print(figures.render())
    return 0 if all(r.ok for r in figures.results) else 1


if __name__ == "__main__":
    sys.exit(main())
