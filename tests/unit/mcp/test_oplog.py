"""The op-event writer never blocks its caller: a dead database means dropped rows and one warning line."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from pipeline.mcp.oplog import OpEventLog, rows_for
from sinks.events import OpEvent, op_event_columns, op_event_storable

PAGE = {"slug": "people/alice-example", "source_id": "default", "display": "Alice Example", "confidence": 0.85,
        "arm": "title", "rationale": 'exact title match "Alice Example"', "synopsis": "Founder."}


def test_rows_hold_no_display_or_synopsis_and_have_the_op_channel() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    (row,) = rows_for([PAGE], "s", None, at)
    assert row == OpEvent("default", "people/alice-example", 0.85, "title", 'exact title match "Alice Example"',
                          "s", None, at)
    cols = op_event_columns([row])
    assert [c[0] for c in cols] == ["default", "people/alice-example", 0.85, "title",
                                    'exact title match "Alice Example"', "op", "s", None, at]


def test_unstorable_rows_are_recognised() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    assert op_event_storable(rows_for([PAGE], "s", 1, at)[0])
    assert not op_event_storable(rows_for([PAGE], "s\x00", 1, at)[0])
    assert not op_event_storable(rows_for([PAGE], "\ud800", 1, at)[0])
    assert not op_event_storable(rows_for([PAGE], "s", 2**40, at)[0])


def test_submit_never_blocks_and_close_is_bounded() -> None:
    warnings: list[str] = []
    log = OpEventLog("postgresql://nobody@127.0.0.1:1/none", warn=warnings.append, max_pending=10)
    started = time.monotonic()
    accepted = [log.submit([PAGE], "s", turn) for turn in range(1000)]
    assert time.monotonic() - started < 0.5
    assert not all(accepted)  # the queue is bounded: the overflow is dropped, not waited for
    left = log.close(timeout=3)
    assert time.monotonic() - started < 6
    assert log.written == 0 and log.dropped + left >= 1000 - 10
    assert warnings and all("\n" not in w and w.startswith("volunteer: warning: op event logging") for w in warnings)
    assert len(warnings) <= 3  # rate-limited, not one line per call
