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
from pipeline.core.extract import extract_candidates
from pipeline.settings import Settings
from tests.integration.stream.harness import CONFORMANCE_BRAIN, run
from tests.reliability.conftest import Workers
from tests.reliability.crash import CrashFigures, CrashPlan, run_crash
from tests.reliability.privacy import (
    database_strings,
    find_leaks,
    find_words,
    fold,
    log_strings,
    private_strings,
    rationale_is_template,
    topic_strings,
)
from tests.reliability.verify import ExpectedEvent, expected_events
from tests.reliability.workload import Workload, build_workload
from tests.services.broker import new_names, settings_for
from topics.definitions import ensure_topics
from topics.io import read_all
from topics.records import Volunteered

pytestmark = [pytest.mark.integration, pytest.mark.reliability]


@dataclass
class CrashOutcome:
    prefix: str  # every topic of the run (and its app id) starts with it
    settings: Settings = field(repr=False)
    workload: Workload = field(repr=False)
    expected: dict[str, ExpectedEvent] = field(repr=False)
    figures: CrashFigures


def crash_outcome(broker_url: str, database_url: str, brain: BrainIndex, pool: Workers, *, turns: int,
                  plan: CrashPlan, rate: float, concurrent: int = 300, canary_share: float = 0.0) -> CrashOutcome:
    names = new_names()
    settings = settings_for(broker_url, names, database_url=database_url, topic_partitions=4)
    run(ensure_topics(settings))
    workload = build_workload(turns, seed=plan.seed, concurrent=concurrent, canary_share=canary_share)
    expected = expected_events(workload, brain)
    plan.rate = rate
    figures = run_crash(settings, workload, expected, plan, lambda: pool.start(settings))
    print("\n" + figures.render())
    return CrashOutcome(names.prefix, settings, workload, expected, figures)


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
    """One worker, ~4,000 turns, 3 SIGKILLs: shared with the privacy test, which reads its outputs
    (a quarter of the turns carry canary words for it)."""
    yield crash_outcome(module_broker_url, module_database_url, conformance_brain, module_workers, turns=4000,
                        plan=CrashPlan(workers=1, kills=3, seed=4242), rate=220, canary_share=0.25)


def test_one_worker_killed_three_times_loses_and_duplicates_nothing(short_crash: CrashOutcome) -> None:
    assert_exact(short_crash, kills=3)


def test_no_conversation_text_outside_the_turns_topic(short_crash: CrashOutcome) -> None:
    """Privacy on the crash run, word by word: no canary word planted in the turns, and no turn text
    (>= 20 chars), appears in any table, any topic but ``turns`` (the session table's changelog and
    ``turns-dlq`` included), or any INFO+ log line; every rationale is the spec's template over the
    display; no take or private fact of the brain reaches ``volunteered``."""
    settings = short_crash.settings
    workload = short_crash.workload
    texts = workload.texts()
    database = list(database_strings(settings.database_url))
    topics = run(topic_strings(settings, (short_crash.prefix,), exclude=(settings.topic_turns,)), timeout=300)
    logs = list(log_strings(short_crash.figures.logs))
    checked_topics = {topic for topic, _ in topics}
    changelog = f"{settings.app_id}-sessions-changelog"
    assert {settings.topic_volunteered, changelog} <= checked_topics
    brain_text = fold((CONFORMANCE_BRAIN / "pages.jsonl").read_text(encoding="utf-8"))
    canaries = workload.canaries
    assert len(canaries) > 1000 and not [w for w in canaries if fold(w) in brain_text]
    haystack = [*database, *topics, *logs]
    word_leaks = find_words(canaries, haystack)
    leaks = find_leaks(texts, haystack)
    print(f"\nprivacy: {len(canaries)} canary words and {sum(len(t) >= 20 for t in texts)} turn texts checked "
          f"against {len(database)} table values, {len(topics)} strings of {len(checked_topics)} topics, "
          f"{len(logs)} log strings; word leaks {len(word_leaks)}, turn leaks {len(leaks)}")
    assert word_leaks == [] and leaks == []

    events = [Volunteered.from_json(r.value) for r in
              run(read_all(settings, settings.topic_volunteered, idle_s=1.0), timeout=120) if r.value is not None]
    slugs_with_secrets, secrets = private_strings(CONFORMANCE_BRAIN)
    assert secrets and events
    assert [e for e in events if not rationale_is_template(e.rationale, e.display)] == []
    exposed = [(e.slug, s) for e in events for s in secrets if s in e.synopsis or s in e.display]
    assert exposed == []
    assert all("gbrain:takes" not in e.synopsis for e in events)
    assert sum(e.slug in slugs_with_secrets for e in events) > 10  # pages with secrets were volunteered


def test_the_session_changelog_holds_no_candidate_word(short_crash: CrashOutcome) -> None:
    """The limit the docs used to state (a turn that is one candidate run kept whole in the changelog)
    is gone: states are sealed, so not even one candidate word of any turn is readable there, while
    the canaries were candidates (the run volunteered pages, so states held windows)."""
    settings = short_crash.settings
    changelog = f"{settings.app_id}-sessions-changelog"
    strings = run(topic_strings(settings, (changelog,), exclude=()), timeout=300)
    assert strings  # keys (session ids) at least
    candidate_words = {word for text in short_crash.workload.texts() for cand in extract_candidates(text)
                       for word in cand[0].split() if len(word) >= 6}
    assert len(candidate_words) > 1000
    assert find_words(candidate_words, strings) == []
    assert find_leaks(short_crash.workload.texts(), strings) == []


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


@pytest.mark.long
@pytest.mark.parametrize("worker_count", [1, 2])
def test_long_crash_run_with_a_backlog(worker_count: int, module_broker_url: str, migrated_database_url: str,
                                       conformance_brain: BrainIndex, workers: Workers) -> None:
    """The same, produced faster than the workers keep up: every restart meets a backlog, so the inline
    drain (compat/fastdrain.py) hands whole fetches over and window batches run to hundreds of turns,
    the conditions under which a delivery race once lost rows (docs/performance.md)."""
    outcome = crash_outcome(module_broker_url, migrated_database_url, conformance_brain, workers, turns=50_000,
                            plan=CrashPlan(workers=worker_count, kills=8, seed=31_337 + worker_count),
                            rate=6000, concurrent=1500)
    assert outcome.workload.sessions >= 1000
    assert_exact(outcome, kills=8)
