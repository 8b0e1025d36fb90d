"""TurnPublisher against a real broker: keys, numbering, JSON, validation and delivery failures."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest

from pipeline.client import InvalidRecord, PublishError, TopicUnavailable, TurnPublisher
from pipeline.embedded.tansu import EmbeddedBroker, free_port
from pipeline.settings import Settings, load_settings
from tests.integration.client.helpers import read_topic, run
from topics.clients import make_admin
from topics.definitions import ensure_topics
from topics.records import decode_turn

pytestmark = pytest.mark.integration


def test_turns_of_several_sessions_are_keyed_numbered_and_valid(client_settings: Settings) -> None:
    conversation = [
        ("support-1", "User", "  Did Alice Chen sign the Acme renewal?  "),
        ("support-2", "user", "What is our refund policy?"),
        ("support-1", "ASSISTANT", "Not yet; legal is reviewing it."),
        ("support-3", "user", "hi"),
        ("support-2", "assistant", "30 days, no questions asked."),
        ("support-1", "user", "Who at Acme owns it?"),
    ]
    when = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

    async def publish() -> list[int | None]:
        numbers = []
        async with TurnPublisher(client_settings) as publisher:
            for i, (session, role, text) in enumerate(conversation):
                ts = [when, int(when.timestamp() * 1000), "2025-06-01T14:00:00+02:00"][i % 3]
                record = await publisher.publish(session, role, text, ts=ts, source_id="team", channel="web")
                numbers.append(record.turn if record else None)
        return numbers

    assert run(publish()) == [1, 1, 2, 1, 2, 3]
    records = run(read_topic(client_settings, client_settings.topic_turns, len(conversation)))
    assert len(records) == len(conversation)

    by_session: dict[str, list[tuple[int, int, dict[str, object]]]] = {}
    for rec in records:
        assert rec.key is not None and rec.value is not None
        turn = decode_turn(rec.value, rec.key)  # the worker's decoder accepts it as is
        assert turn is not None and rec.key == turn.session_id.encode()
        by_session.setdefault(turn.session_id, []).append((rec.partition, rec.offset, orjson.loads(rec.value)))

    expected_ms = int(when.timestamp() * 1000)
    for session in ("support-1", "support-2", "support-3"):
        rows = sorted(by_session[session], key=lambda r: r[1])
        assert len({partition for partition, _, _ in rows}) == 1, f"{session} spread over partitions"
        sent = [(role, text) for s, role, text in conversation if s == session]
        assert [obj["turn"] for _, _, obj in rows] == list(range(1, len(sent) + 1))
        assert [(obj["role"], obj["text"]) for _, _, obj in rows] == [(r.lower(), t.strip()) for r, t in sent]
        for _, _, obj in rows:
            assert obj["session_id"] == session
            assert obj["ts"] == expected_ms
            assert (obj["source_id"], obj["channel"]) == ("team", "web")


def test_explicit_numbers_resume_and_forget(client_settings: Settings) -> None:
    async def scenario() -> list[int]:
        out: list[int] = []
        async with TurnPublisher(client_settings) as publisher:
            for kwargs in ({}, {"turn": 10}, {}, {"turn": 4}, {}):
                record = await publisher.publish("s", "user", "text", **kwargs)  # type: ignore[arg-type]
                assert record is not None and record.turn is not None
                out.append(record.turn)
            assert publisher.last_turn("s") == 12
            publisher.resume("restarted", 41)
            record = await publisher.publish("restarted", "user", "after a restart")
            assert record is not None and record.turn is not None
            out.append(record.turn)
            publisher.forget("s")
            assert publisher.last_turn("s") is None and publisher.next_turn("s") == 1
            with pytest.raises(ValueError, match="last_turn"):
                publisher.resume("s", -1)
        return out

    # A number at or below the highest one (4) is sent as given; auto-numbering continues after 11.
    assert run(scenario()) == [1, 10, 11, 4, 12, 42]
    records = run(read_topic(client_settings, client_settings.topic_turns, 6))
    assert sorted(orjson.loads(r.value or b"")["turn"] for r in records) == [1, 4, 10, 11, 12, 42]


def test_blank_text_is_not_a_turn(client_settings: Settings) -> None:
    async def scenario() -> list[object]:
        async with TurnPublisher(client_settings) as publisher:
            first = await publisher.publish("s", "user", " \n\t ")
            second = await publisher.publish("s", "user", "real text")
            return [first, second.turn if second else None, publisher.next_turn("s")]

    assert run(scenario()) == [None, 1, 2]
    records = run(read_topic(client_settings, client_settings.topic_turns, 1))
    assert [orjson.loads(r.value or b"")["text"] for r in records] == ["real text"]


@pytest.mark.parametrize(
    ("args", "kwargs", "code"),
    [
        (("s", "system", "hello"), {}, "unknown_role"),
        (("", "user", "hello"), {}, "empty_field"),
        (("x" * 257, "user", "hello"), {}, "session_id_too_long"),
        (("bad\x00id", "user", "hello"), {}, "control_characters"),
        (("s", "user", "hello"), {"turn": 0}, "invalid_turn"),
        (("s", "user", "hello"), {"ts": datetime(2025, 1, 1)}, "invalid_ts"),
        (("s", "user", "hello"), {"ts": "yesterday"}, "invalid_ts"),
        (("s", "user", "hello"), {"channel": "c" * 65}, "field_too_long"),
        (("s", "user", "bad \ud800 surrogate"), {}, "invalid_value"),
    ],
)
def test_invalid_input_is_refused_before_sending(client_settings: Settings, args: tuple[str, str, str],
                                                 kwargs: dict[str, object], code: str) -> None:
    async def scenario() -> None:
        async with TurnPublisher(client_settings) as publisher:
            with pytest.raises(InvalidRecord) as caught:
                await publisher.publish(*args, **kwargs)  # type: ignore[arg-type]
            assert caught.value.code == code
            assert publisher.last_turn(args[0]) is None  # nothing counted
            await publisher.publish("ok", "user", "the only record")

    run(scenario())
    records = run(read_topic(client_settings, client_settings.topic_turns, 1))
    assert [r.key for r in records] == [b"ok"]


def test_text_over_the_configured_limit_is_refused(stream_settings: object) -> None:
    settings = stream_settings(max_text_bytes=1000)  # type: ignore[operator]
    run(ensure_topics(settings))

    async def scenario() -> None:
        async with TurnPublisher(settings) as publisher:
            with pytest.raises(InvalidRecord) as caught:
                await publisher.publish("s", "user", "é" * 600)  # 1200 bytes
            assert caught.value.code == "text_too_large"
            assert await publisher.publish("s", "user", "é" * 400) is not None

    run(scenario())


def test_concurrent_tasks_get_numbers_in_send_order(client_settings: Settings) -> None:
    async def scenario() -> None:
        async with TurnPublisher(client_settings, linger_ms=20) as publisher:
            await asyncio.gather(*(publisher.publish("busy", "user", f"message {i}") for i in range(200)))

    run(scenario())
    records = run(read_topic(client_settings, client_settings.topic_turns, 200))
    turns = [orjson.loads(r.value or b"")["turn"] for r in sorted(records, key=lambda r: r.offset)]
    assert turns == list(range(1, 201))


def test_undelivered_turns_are_reported_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    """The broker dies after the first turn: flush() names the three turns it never acknowledged."""
    caplog.set_level(logging.CRITICAL, logger="aiokafka")  # connection-refused noise
    broker = EmbeddedBroker(cluster_id="client-failure").start()
    settings = load_settings(broker=broker.url, topic_turns="failing-turns", topic_partitions=1)
    try:
        run(ensure_topics(settings))

        async def scenario() -> PublishError:
            publisher = TurnPublisher(settings, request_timeout_ms=1500, retry_backoff_ms=100)
            await publisher.start()
            try:
                await publisher.publish("s", "user", "delivered")
                await publisher.flush()
                assert broker.pid is not None
                os.kill(broker.pid, signal.SIGKILL)  # a crash; SIGTERM waits for clients to leave
                for text in ("lost 1", "lost 2", "lost 3"):
                    await publisher.publish("s", "user", text)
                with pytest.raises(PublishError) as caught:
                    await publisher.flush()
                return caught.value
            finally:
                await publisher.stop()

        error = run(scenario())
    finally:
        broker.stop()
    assert [(t.turn, t.text) for t in error.failed] == [(2, "lost 1"), (3, "lost 2"), (4, "lost 3")]
    assert "3 turn(s)" in str(error) and "failing-turns" in str(error)


def test_unreachable_broker_is_a_clear_error() -> None:
    settings = load_settings(broker=f"kafka://127.0.0.1:{free_port()}")

    async def scenario() -> None:
        with pytest.raises(TopicUnavailable, match=r"cannot publish to topic 'turns' on kafka://127\.0\.0\.1"):
            await TurnPublisher(settings, start_timeout=5).start()

    run(scenario())


def test_publish_before_start_says_how_to_start() -> None:
    async def scenario() -> None:
        with pytest.raises(RuntimeError, match="async with TurnPublisher"):
            await TurnPublisher(load_settings()).publish("s", "user", "x")

    run(scenario())


def test_ts_forms_agree() -> None:
    from pipeline.client import ts_to_ms

    aware = datetime(2025, 6, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert ts_to_ms(aware) == ts_to_ms("2025-06-01T12:00:00Z") == ts_to_ms(1748779200000) == 1748779200000
    with pytest.raises(InvalidRecord):
        ts_to_ms(datetime(2025, 6, 1))


def test_a_missing_topic_is_reported_not_created(stream_settings: object) -> None:
    """Auto-creating brokers (the embedded one always) would create it with their own partition
    count; the client refuses instead, and the topic still does not exist afterwards."""
    settings = stream_settings()  # type: ignore[operator]

    async def scenario() -> set[str]:
        with pytest.raises(TopicUnavailable, match=rf"topic '{settings.topic_turns}' does not exist.*start a worker"):
            await TurnPublisher(settings).start()
        admin = make_admin(settings)
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    assert settings.topic_turns not in run(scenario())
