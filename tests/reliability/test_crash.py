"""SIGKILL crash runs: nothing lost, nothing stored twice, whatever moment the workers die.

A seeded workload of numbered and unnumbered sessions is streamed through the embedded broker
while ``volunteer worker`` processes are SIGKILLed and restarted (some killed again during their
own table recovery); with one worker, and with two sharing the partitions (one dies, the other
takes over). The verifier (:mod:`tests.reliability.verify`) rebuilds the expected events with an
in-process replay of the same input: the table must be exact, the topic complete (duplicates with
the same event_id are counted and reported).

Short variants run by default; the long ones (50,000+ turns, 6,000+ sessions) need ``--long`` and
print their figures (``pytest --long -s tests/reliability/test_crash.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from pipeline.core.brain import BrainIndex
from pipeline.settings import Settings
from tests.integration.stream.harness import run
from tests.reliability.conftest import Workers
from tests.reliability.crash import CrashFigures, CrashPlan, run_crash
from tests.reliability.verify import ExpectedEvent, expected_events
from tests.reliability.workload import Workload, build_workload
from tests.services.broker import new_names, settings_for
from topics.definitions import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


@dataclass
class CrashOutcome:
    settings: Settings = field(repr=False)
    workload: Workload = field(repr=False)
    expected: dict[str, ExpectedEvent] = field(repr=False)
    figures: CrashFigures


def crash_outcome(broker_url: str, database_url: str, brain: BrainIndex, pool: Workers, *, turns: int,
                  plan: CrashPlan, rate: float, concurrent: int = 300) -> CrashOutcome:
    settings = settings_for(broker_url, new_names(), database_url=database_url, topic_partitions=4)
    run(ensure_topics(settings))
    workload = build_workload(turns, seed=plan.seed, concurrent=concurrent)
    expected = expected_events(workload, brain)
    plan.rate = rate
    figures = run_crash(settings, workload, expected, plan, lambda: pool.start(settings))
    print("\n" + figures.render())
    return CrashOutcome(settings, workload, expected, figures)


def assert_exact(outcome: CrashOutcome, kills: int) -> None:
    figures = outcome.figures
    verdict = figures.verdict
    assert verdict is not None
    assert figures.kills >= kills
    assert outcome.workload.numbered_sessions > 0 and outcome.workload.unnumbered_sessions > 0
    assert len(outcome.expected) > 0
    assert verdict.exact, verdict.problems()
    assert verdict.rows_found == verdict.rows_expected == len(outcome.expected)


@pytest.fixture(scope="module")
def short_crash(module_broker_url: str, module_database_url: str, conformance_brain: BrainIndex,
                module_workers: Workers) -> Iterator[CrashOutcome]:
    """One worker, ~4,000 turns, 3 SIGKILLs: shared with the privacy test, which reads its outputs."""
    yield crash_outcome(module_broker_url, module_database_url, conformance_brain, module_workers, turns=4000,
                        plan=CrashPlan(workers=1, kills=3, seed=4242), rate=220)


def test_one_worker_killed_three_times_loses_and_duplicates_nothing(short_crash: CrashOutcome) -> None:
    assert_exact(short_crash, kills=3)


def test_two_workers_one_killed_while_the_other_takes_over(module_broker_url: str, migrated_database_url: str,
                                                          conformance_brain: BrainIndex, workers: Workers) -> None:
    outcome = crash_outcome(module_broker_url, migrated_database_url, conformance_brain, workers, turns=3000,
                            plan=CrashPlan(workers=2, kills=3, seed=777), rate=200)
    assert_exact(outcome, kills=3)


@pytest.mark.long
@pytest.mark.parametrize("worker_count", [1, 2])
def test_long_crash_run(worker_count: int, module_broker_url: str, migrated_database_url: str,
                        conformance_brain: BrainIndex, workers: Workers) -> None:
    outcome = crash_outcome(module_broker_url, migrated_database_url, conformance_brain, workers, turns=50_000,
                            plan=CrashPlan(workers=worker_count, kills=8, seed=20_260 + worker_count),
                            rate=700, concurrent=1500)
    assert outcome.workload.sessions >= 1000
    assert_exact(outcome, kills=8)
