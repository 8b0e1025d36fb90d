"""The reference's watch sessions (default flags), streamed through a real broker and worker."""

from __future__ import annotations

import pytest

from pipeline.settings import Settings
from tests.integration.stream.conftest import WorkerFactory
from tests.integration.stream.harness import (
    CONFORMANCE_BRAIN,
    assert_rows_match,
    conformance_sessions,
    distinct_by_session,
    expected_events,
    interleave,
    run,
    volunteered_on_topic,
    wait_for_rows,
)
from topics.io import produce_turns, read_all
from topics.records import event_id_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("direct", ["true", "false"], ids=["direct-feeds", "faust-streams"])
def test_all_default_flag_watch_sessions_match_the_reference(pipeline_settings: Settings,
                                                             start_worker: WorkerFactory, direct: str) -> None:
    """Both ways into the agents (settings.direct_delivery): the direct feeds, and Faust's streams."""
    settings = pipeline_settings
    sessions = conformance_sessions()
    expected = expected_events(sessions)
    total = sum(len(v) for v in expected.values())
    assert len(sessions) == 225 and total == 344  # the whole default-flag part of the corpus

    run(produce_turns(settings, interleave(sessions)))
    worker = start_worker("--brain", str(CONFORMANCE_BRAIN), VOLUNTEER_DIRECT_DELIVERY=direct)

    events = volunteered_on_topic(settings, total)
    assert distinct_by_session(events) == {sid: evs for sid, evs in expected.items() if evs}
    assert len(events) == total  # a clean run publishes each event once
    for event in events:
        assert event.channel == "stream"
        assert event.event_id == event_id_for(event.session_id, event.turn, event.source_id, event.slug, "stream")
        assert event.volunteered_at.endswith("Z")

    assert_rows_match(wait_for_rows(settings.database_url, total), expected)
    assert run(read_all(settings, settings.topic_dlq, idle_s=0.3)) == []
    assert worker.stop() == 0
