"""Page-open records: what is accepted, the dead-letter reason of what is not, and batch merging."""

from __future__ import annotations

import orjson
import pytest

from sinks.retrieval import Open, merge_opens
from topics.page_opens import PageOpen, decode_page_open
from topics.records import InvalidRecord


def test_round_trip_with_and_without_optional_fields() -> None:
    full = PageOpen("people/alice-example", "default", "s1", 1_767_261_607_000)
    assert decode_page_open(full.to_json()) == full
    assert orjson.loads(full.to_json())["opened_at"] == "2026-01-01T10:00:07.000Z"
    bare = PageOpen("people/alice-example", "work")
    assert decode_page_open(bare.to_json()) == bare
    assert bare.key() == b"work/people/alice-example"


def test_opened_at_accepts_rfc3339_and_epoch_ms_and_ignores_unknown_fields() -> None:
    a = decode_page_open(b'{"slug":"a","source_id":"s","opened_at":"2026-01-01T10:00:07+00:00","x":1}')
    b = decode_page_open(b'{"slug":"a","source_id":"s","opened_at":1767261607000}')
    assert a.opened_at_ms == b.opened_at_ms == 1_767_261_607_000
    assert a.session_id is None


@pytest.mark.parametrize(("raw", "code"), [
    (None, "missing_value"),
    (b"{not json", "invalid_json"),
    (b"[1]", "not_an_object"),
    (b'{"source_id":"s"}', "missing_field"),
    (b'{"slug":"a"}', "missing_field"),
    (b'{"slug":"","source_id":"s"}', "empty_field"),
    (b'{"slug":7,"source_id":"s"}', "wrong_type"),
    (b'{"slug":"a\\u0000b","source_id":"s"}', "control_characters"),
    (b'{"slug":" a","source_id":"s"}', "invalid_field"),
    (b'{"slug":"a","source_id":"s","session_id":5}', "wrong_type"),
    (b'{"slug":"a","source_id":"s","opened_at":"yesterday"}', "invalid_opened_at"),
    (b'{"slug":"a","source_id":"s","opened_at":"2026-01-01T10:00:00"}', "invalid_opened_at"),
    (b'{"slug":"a","source_id":"s","opened_at":true}', "invalid_opened_at"),
    (b'{"slug":"' + b"x" * 70_000 + b'","source_id":"s"}', "oversize"),
])
def test_invalid_records_name_their_reason(raw: bytes | None, code: str) -> None:
    with pytest.raises(InvalidRecord) as err:
        decode_page_open(raw)
    assert err.value.code == code
    assert err.value.message


def test_merge_keeps_one_open_per_page_latest_time_and_now_wins() -> None:
    merged = merge_opens([
        Open("s", "b", 100), Open("s", "a", 300), Open("s", "b", 200), Open("t", "a", 50),
        Open("s", "c", 10), Open("s", "c", None), Open("s", "c", 20),
    ])
    assert merged == [Open("s", "a", 300), Open("s", "b", 200), Open("s", "c", None), Open("t", "a", 50)]
    assert merge_opens([]) == []
