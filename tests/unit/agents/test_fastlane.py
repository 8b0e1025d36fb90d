"""The fast lane's bookkeeping (agents/fastlane.py): when the hook endpoint may commit the records it
just published, and that an agent batch waits for it. The end-to-end behaviour (a real worker, the
records skipped by the agent, a kill in between) is tests/integration/hook/test_fast_lane.py."""

from __future__ import annotations

import asyncio

from pipeline.agents.batch_types import InRecord
from pipeline.agents.fastlane import FastLane, consecutive


def recs(partition: int, *offsets: int) -> list[InRecord]:
    return [InRecord(b"s", b"{}", partition, offset) for offset in offsets]


async def lane_done_through(partition: int, offset: int, generation: int = 1) -> FastLane:
    """A lane whose agent has decided and saved ``partition`` up to ``offset``."""
    lane = FastLane()
    await lane.before_batch(recs(partition, offset), generation)
    lane.after_batch(recs(partition, offset), generation)
    return lane


def test_consecutive_accepts_one_partition_at_consecutive_offsets_only() -> None:
    assert consecutive([("turns", 3, 10, 2), ("turns", 3, 12, 1)], "turns") == (3, 10, 12)
    assert consecutive([("turns", 3, 10, 1)], "turns") == (3, 10, 10)
    assert consecutive([], "turns") is None
    assert consecutive([("turns", 3, 10, 2), ("turns", 3, 13, 1)], "turns") is None  # someone else's record between
    assert consecutive([("turns", 3, 10, 1), ("turns", 4, 11, 1)], "turns") is None
    assert consecutive([("other", 3, 10, 1)], "turns") is None
    assert consecutive([("turns", 3, -1, 1)], "turns") is None  # no offset from the broker


def test_claim_needs_every_earlier_record_of_the_partition_done() -> None:
    async def main() -> None:
        lane = FastLane()
        assert lane.claim(0, 5, 5, 1, False) is None  # nothing known of partition 0 yet
        await lane.before_batch(recs(0, 3, 4), 1)
        assert lane.claim(0, 5, 5, 1, False) is None  # taken but not saved yet
        lane.after_batch(recs(0, 3, 4), 1)
        assert lane.claim(0, 6, 6, 1, False) is None  # record 5 is someone else's, not applied
        assert lane.claim(0, 5, 5, 1, True) is None  # rebalancing
        claim = lane.claim(0, 5, 7, 1, False)
        assert claim is not None
        assert lane.claim(0, 8, 8, 1, False) is None  # one claim per partition at a time
        lane.release(claim, committed=True)
        assert lane.taken_by_lane == 1
        follow = lane.claim(0, 8, 8, 1, False)
        assert follow is not None
        lane.release(follow, committed=True)

    asyncio.run(main())


def test_a_rebalance_forgets_the_progress() -> None:
    async def main() -> None:
        lane = await lane_done_through(1, 0)
        assert lane.claim(1, 1, 1, 2, False) is None  # generation 2: partition 1 unknown again
        await lane.before_batch(recs(1, 0), 2)  # redelivered after the rebalance
        lane.after_batch(recs(1, 0), 3)  # ... but another rebalance came before it was saved
        assert lane.claim(1, 1, 1, 3, False) is None

    asyncio.run(main())


def test_an_agent_batch_waits_for_the_claim_on_its_partition() -> None:
    async def main() -> None:
        lane = await lane_done_through(2, 0)
        claim = lane.claim(2, 1, 2, 1, False)
        assert claim is not None
        order: list[str] = []

        async def agent() -> None:
            await lane.before_batch(recs(2, 1, 2, 3), 1)
            order.append("agent decides")

        task = asyncio.ensure_future(agent())
        await asyncio.sleep(0.01)
        assert order == []  # still waiting for the lane
        order.append("lane saved")
        lane.release(claim, committed=True)
        await task
        assert order == ["lane saved", "agent decides"]
        assert lane.claim(2, 4, 4, 1, False) is None  # record 3 is in the agent's unfinished batch
        lane.after_batch(recs(2, 1, 2, 3), 1)
        assert lane.claim(2, 4, 4, 1, False) is not None

    asyncio.run(main())


def test_a_failed_lane_commit_closes_the_lane_for_the_partition_until_a_rebalance() -> None:
    async def main() -> None:
        lane = await lane_done_through(0, 0)
        claim = lane.claim(0, 1, 1, 1, False)
        assert claim is not None
        lane.release(claim, committed=False)
        assert claim.ended.done()
        await lane.before_batch(recs(0, 1), 1)  # the agent applies it
        lane.after_batch(recs(0, 1), 1)
        assert lane.claim(0, 2, 2, 1, False) is None
        await lane.before_batch(recs(0, 1), 2)
        lane.after_batch(recs(0, 1), 2)
        assert lane.claim(0, 2, 2, 2, False) is not None

    asyncio.run(main())
