"""Readiness: every check must hold, and the answer names which failed (pure, no worker)."""

from __future__ import annotations

import orjson
import pytest

from pipeline.agents.health import BROKER_SILENCE_S, Readiness


def test_ready_when_every_check_holds() -> None:
    state = Readiness(partitions=2, recovering=False, lag=10, max_lag=10, brain_pages=5)
    assert state.ready
    body = orjson.loads(state.to_json())
    assert body["status"] == "ready" and all(body["checks"].values())


@pytest.mark.parametrize(("change", "failed"), [
    ({"partitions": 0}, "partitions"),
    ({"recovering": True}, "recovered"),
    ({"lag": 11}, "caught_up"),
    ({"brain_pages": None}, "brain"),
    ({"broker_silence_s": BROKER_SILENCE_S + 0.1}, "broker"),  # cut off from the broker: its view is stale
    ({"broker_silence_s": None}, "broker"),  # no Fetch answer yet
])
def test_each_failed_check_makes_it_not_ready(change: dict[str, object], failed: str) -> None:
    values: dict[str, object] = {"partitions": 2, "recovering": False, "lag": 0, "max_lag": 10, "brain_pages": 5}
    values.update(change)
    state = Readiness(**values)  # type: ignore[arg-type]
    body = orjson.loads(state.to_json())
    assert not state.ready and body["status"] == "not_ready"
    assert [name for name, ok in body["checks"].items() if not ok] == [failed]
