"""VolunteeredConsumer against a real broker: session filter, start modes, groups, bad records, close."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from pipeline.client import ConsumerClosed, TopicUnavailable, Volunteered, VolunteeredConsumer
from pipeline.embedded.tansu import free_port
from pipeline.settings import Settings, load_settings
from tests.integration.client.helpers import page, run, seed_pages, seed_raw
from topics.clients import make_admin

pytestmark = pytest.mark.integration


def interleaved(sessions: list[str], turns: int) -> list[Volunteered]:
    return [page(s, t, f"people/person-{s}-{t}") for t in range(1, turns + 1) for s in sessions]


def test_one_session_from_the_beginning(client_settings: Settings) -> None:
    pages = interleaved(["s1", "s2", "s3"], 5)
    run(seed_pages(client_settings, pages))

    async def read() -> list[Volunteered]:
        async with VolunteeredConsumer(client_settings, session_id="s2", start="earliest") as consumer:
            return await consumer.drain()

    got = run(read())
    assert got == [p for p in pages if p.session_id == "s2"]  # every field, in turn order


def test_every_session_when_no_filter(client_settings: Settings) -> None:
    pages = interleaved(["a", "b"], 3)
    run(seed_pages(client_settings, pages))

    async def read() -> list[Volunteered]:
        async with VolunteeredConsumer(client_settings, start="earliest") as consumer:
            return await consumer.drain()

    got = run(read())
    assert sorted(got, key=lambda p: (p.session_id, p.turn)) == sorted(pages, key=lambda p: (p.session_id, p.turn))


def test_from_now_ignores_pages_already_on_the_topic(client_settings: Settings) -> None:
    """Old pages arrive as multi-record batches, which is where the embedded broker's LATEST
    offset answers too early; the consumer must still start exactly at the end."""
    run(seed_pages(client_settings, interleaved(["live"], 30)))
    new = [page("live", 100, "companies/acme"), page("other", 100, "companies/zeta"), page("live", 101, "x/y")]

    async def follow() -> tuple[list[Volunteered], list[Volunteered]]:
        async with VolunteeredConsumer(client_settings, session_id="live") as consumer:
            await seed_pages(client_settings, new)
            first = [await consumer.__anext__(), await consumer.__anext__()]
            rest = await consumer.drain()
            return first, rest

    first, rest = run(follow())
    assert first == [new[0], new[2]]
    assert rest == []


def test_invalid_records_are_skipped_and_counted(client_settings: Settings) -> None:
    good = page("s", 1, "companies/acme")
    run(seed_raw(client_settings, client_settings.topic_volunteered, [
        (b"s", b"not json"),
        (b"s", b'{"session_id": "s"}'),
        (b"other", b"not json either"),  # another session's record is not even decoded
        (b"s", good.to_json()),
    ]))

    async def read() -> tuple[list[Volunteered], int]:
        async with VolunteeredConsumer(client_settings, session_id="s", start="earliest") as consumer:
            return await consumer.drain(), consumer.skipped_invalid

    assert run(read()) == ([good], 2)


def test_close_from_another_task_ends_the_iteration(client_settings: Settings) -> None:
    async def scenario() -> list[Volunteered]:
        seen: list[Volunteered] = []
        consumer = await VolunteeredConsumer(client_settings, session_id="s", poll_timeout=0.2).start()

        async def reader() -> None:
            async for p in consumer:
                seen.append(p)

        task = asyncio.create_task(reader())
        await seed_pages(client_settings, [page("s", 1, "a/b")])
        while not seen:
            await asyncio.sleep(0.01)
        await consumer.close()
        await asyncio.wait_for(task, 10)  # the async for ended by itself
        with pytest.raises(ConsumerClosed):
            await consumer.drain()
        return seen

    assert [p.turn for p in run(scenario())] == [1]


def test_group_resumes_after_the_pages_it_finished(client_settings: Settings) -> None:
    pages = interleaved(["g"], 6)
    run(seed_pages(client_settings, pages))
    group = client_settings.app_id + "-readers"

    async def first_reader() -> list[int]:
        turns = []
        async with VolunteeredConsumer(client_settings, group_id=group, start="earliest") as consumer:
            async for p in consumer:
                turns.append(p.turn)
                if len(turns) == 3:
                    break  # leaving the block normally: the 3rd page counts as handled
        return turns

    async def failing_reader() -> list[int]:
        turns = []
        with pytest.raises(RuntimeError, match="boom"):
            async with VolunteeredConsumer(client_settings, group_id=group) as consumer:
                async for p in consumer:
                    turns.append(p.turn)
                    if len(turns) == 2:
                        raise RuntimeError("boom")  # the 2nd page (turn 5) was not handled
        return turns

    async def last_reader() -> list[int]:
        async with VolunteeredConsumer(client_settings, group_id=group) as consumer:
            return [p.turn for p in await consumer.drain()]

    assert run(first_reader()) == [1, 2, 3]
    assert run(failing_reader()) == [4, 5]
    assert run(last_reader()) == [5, 6]


def test_group_from_now_starts_at_the_end_when_nothing_is_committed(client_settings: Settings) -> None:
    run(seed_pages(client_settings, interleaved(["n"], 10)))

    async def scenario() -> list[int]:
        async with VolunteeredConsumer(client_settings, group_id=client_settings.app_id + "-new") as consumer:
            await seed_pages(client_settings, [page("n", 50, "late/page")])
            return [(await consumer.__anext__()).turn]

    assert run(scenario()) == [50]


def test_bad_arguments_are_refused(client_settings: Settings) -> None:
    with pytest.raises(ValueError, match="start must be"):
        VolunteeredConsumer(client_settings, start="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="session_id"):
        VolunteeredConsumer(client_settings, session_id="")


def test_records_without_a_key_are_filtered_by_their_session_id(client_settings: Settings) -> None:
    mine, other = page("s", 1, "a/mine"), page("t", 1, "a/other")
    run(seed_raw(client_settings, client_settings.topic_volunteered,
                 [(None, other.to_json()), (None, mine.to_json())]))

    async def read() -> list[Volunteered]:
        async with VolunteeredConsumer(client_settings, session_id="s", start="earliest") as consumer:
            return await consumer.drain()

    assert run(read()) == [mine]


def test_unreachable_broker_is_a_clear_error() -> None:
    settings = load_settings(broker=f"kafka://127.0.0.1:{free_port()}")

    async def scenario() -> None:
        with pytest.raises(TopicUnavailable, match=r"cannot read topic 'volunteered' on kafka://127\.0\.0\.1"):
            await VolunteeredConsumer(settings, join_timeout=5).start()

    run(scenario())


@pytest.mark.parametrize("group", [False, True])
def test_a_missing_topic_is_reported_not_created(stream_settings: Callable[..., Settings], group: bool) -> None:
    settings = stream_settings()

    async def scenario() -> set[str]:
        with pytest.raises(TopicUnavailable, match=rf"topic '{settings.topic_volunteered}' does not exist"):
            await VolunteeredConsumer(settings, group_id=settings.app_id if group else None).start()
        admin = make_admin(settings)
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    assert settings.topic_volunteered not in run(scenario())
