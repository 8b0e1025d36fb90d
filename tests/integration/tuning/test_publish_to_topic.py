"""``volunteer replay --to-topic`` against a real broker: keyed, in order per session, own channel."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from tests.services.broker import TestNames, settings_for
from topics.io import Received, read_all
from topics.records import Turn, decode_turn

pytestmark = pytest.mark.integration

SAMPLE = Path(__file__).resolve().parents[3] / "pipeline" / "samples" / "transcript.jsonl"


def publish(broker_url: str, names: TestNames, args: list[str], stdin: bytes = b"") -> tuple[int, str]:
    env = {"VOLUNTEER_TOPIC_TURNS": names.topic("turns"), "VOLUNTEER_TOPIC_VOLUNTEERED": names.topic("volunteered"),
           "VOLUNTEER_TOPIC_DLQ": names.topic("dlq"), "VOLUNTEER_TOPIC_PARTITIONS": "4"}
    result = CliRunner(mix_stderr=False).invoke(main, ["replay", *args, "--to-topic", "--broker", broker_url],
                                                input=stdin, env=env, catch_exceptions=False)
    return result.exit_code, result.stderr


def received(broker_url: str, names: TestNames, expect: int) -> list[Received]:
    settings = settings_for(broker_url, names)
    records = asyncio.run(read_all(settings, settings.topic_turns, expect=expect, timeout_s=60))
    return sorted(records, key=lambda r: (r.partition, r.offset))


def decoded(records: list[Received]) -> list[Turn]:
    """Each record as the worker decodes it (the key must equal the session id)."""
    out = []
    for record in records:
        turn = decode_turn(record.value, record.key)
        assert turn is not None
        out.append(turn)
    return out


def per_session(turns: list[Turn]) -> dict[str, list[Turn]]:
    sessions: dict[str, list[Turn]] = {}
    for turn in turns:
        sessions.setdefault(turn.session_id, []).append(turn)
    return sessions


def test_sample_transcript_arrives_keyed_in_order_on_the_replay_channel(broker_url: str, names: TestNames) -> None:
    source = [decode_turn(line) for line in SAMPLE.read_bytes().splitlines()]
    started_ms = int(time.time() * 1000)
    code, err = publish(broker_url, names, [str(SAMPLE), "--rate", "200"])
    assert code == 0, err
    assert f"published {len(source)} turn(s) of 3 session(s) to {names.topic('turns')} (channel replay)" in err
    records = received(broker_url, names, len(source))
    assert len(records) == len(source)
    got = decoded(records)
    assert all(t.channel == "replay" for t in got)  # the file says "demo": replaced
    assert all(t.ts_ms is not None and t.ts_ms >= started_ms for t in got)  # stamped at sending
    partitions = {}
    for record, turn in zip(records, got, strict=True):
        assert record.key == turn.session_id.encode()
        assert partitions.setdefault(turn.session_id, record.partition) == record.partition
    expected = per_session([t for t in source if t is not None])
    for session, turns in per_session(got).items():
        assert [(t.turn, t.role, t.text) for t in turns] == [(t.turn, t.role, t.text) for t in expected[session]]


def test_original_pace_channel_and_kept_timestamps(broker_url: str, names: TestNames) -> None:
    base = 1_767_600_000_000
    lines = [
        {"session_id": "p-1", "role": "user", "text": "Did Alice Example reply?", "ts": base},
        {"session_id": "p-2", "role": "user", "text": "Where is Lisbon on the agenda?", "ts": base + 20},
        {"session_id": "p-1", "role": "assistant", "text": "Not yet.", "ts": base + 40, "expected_slugs": []},
        {"session_id": "p-1", "role": "user", "text": "   ", "ts": base + 50},  # blank: not a turn
        {"session_id": "p-2", "role": "assistant", "text": "Day two.", "ts": base + 60},
        {"session_id": "p-1", "role": "user", "text": "ok", "ts": base + 80},
    ]
    stdin = b"".join(orjson.dumps(line) + b"\n" for line in lines) + b"{bad json\n"
    code, err = publish(broker_url, names, ["-", "--rate", "original", "--channel", "tuning-test", "--keep-ts"], stdin)
    assert code == 0, err
    assert "line 7: invalid_json" in err
    assert "published 5 turn(s) of 2 session(s)" in err and "1 bad line(s) skipped" in err
    got = per_session(decoded(received(broker_url, names, 5)))
    assert {s: [(t.turn, t.text, t.ts_ms, t.channel) for t in turns] for s, turns in got.items()} == {
        # records without a turn number are numbered per session, as the worker would number them
        "p-1": [(1, "Did Alice Example reply?", base, "tuning-test"), (2, "Not yet.", base + 40, "tuning-test"),
                (3, "ok", base + 80, "tuning-test")],
        "p-2": [(1, "Where is Lisbon on the agenda?", base + 20, "tuning-test"),
                (2, "Day two.", base + 60, "tuning-test")],
    }


def test_an_unreachable_broker_is_a_one_line_error(names: TestNames) -> None:
    code, err = publish("kafka://127.0.0.1:1", names, [str(SAMPLE), "--rate", "1000"])
    assert code == 1
    assert "cannot publish to the broker at kafka://127.0.0.1:1" in err
    assert "Traceback" not in err
