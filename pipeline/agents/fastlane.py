"""The hook endpoint's fast lane: a hook's records committed by the request that published them.

On the ordinary path the endpoint publishes a hook's records on ``turns`` and waits until the
window agent has fetched, decided and saved them (:mod:`pipeline.agents.answers`). Most of that
wait is the fetch: the embedded broker answers a waiting fetch only when its wait ends
(``FETCH_MAX_WAIT_MS``, 20 ms, ``topics/tansu_client.py`` quirk 4), and the consumer pauses
``fetch_pause_ms`` between fetches that found records, so a record published at a random moment
waits about 5-20 ms before the agent sees it (docs/hooks.md, "Speed").

The broker's acknowledgement of the produce tells the endpoint where the records went (partition,
offsets). When they are the *next* records the window agent would take from their partition (every
earlier record of that partition decided and saved, none taken into a batch that is not finished),
the endpoint commits them itself with the window agent's own protocol
(:meth:`pipeline.agents.commit_protocol.WindowCommit.make_durable`: decide from the saved states,
publish the outputs, save the states with the partition and offset of the last record applied)
and answers at once. The agent later consumes the same records and skips them, as it skips a
batch redelivered after a crash: their sessions' saved offsets already cover them
(``SessionRecord.already_applied``; docs/contracts.md, "Crash consistency"). So every record is
still applied once to its session, by whichever of the two came first, and a crash anywhere is the
window protocol's crash: before the save the records are decided again from the saved states by
the agent that consumes them, after it they are skipped.

:class:`FastLane` keeps, per partition of ``turns``, what makes that safe:

- ``done``: the highest offset whose record was decided and saved in this worker (by the agent or
  the lane), and ``taken``: the highest offset taken into a batch, finished or not. The lane may
  take records ``first..last`` only when ``done == taken == first - 1``: nothing before ``first`` is
  pending, and nothing between (the produce's batches are checked to be consecutive) belongs to
  anyone else;
- a **claim** while the lane commits: an agent batch holding a record of a claimed partition waits
  until the claim ends before deciding, so one session is never decided twice at once and the
  agent decides from the states the lane saved;
- both are forgotten at every rebalance (Faust's ``rebalancing_count``), and nothing is taken while
  one is in progress: after a rebalance the lane waits until the agent has finished a batch of the
  partition again (which also means the table's recovery is done). A lane commit that raises
  closes the lane for its partition until the next rebalance.

A request the lane cannot take goes the ordinary way: it waits for the agent's answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipeline.agents.batch_types import InRecord
from pipeline.agents.bulk_send import Placed


@dataclass(frozen=True, slots=True)
class Claim:
    """Records ``first..last`` of ``partition``, being committed by the lane."""

    partition: int
    first: int
    last: int
    generation: int
    ended: asyncio.Future[None]


def consecutive(placed: Sequence[Placed], topic: str) -> tuple[int, int, int] | None:
    """``(partition, first, last)`` when ``placed`` put every record on ``topic``, in one partition,
    at consecutive offsets in the order given; else None."""
    if not placed or any(p[0] != topic for p in placed):
        return None
    partition, first = placed[0][1], placed[0][2]
    expected = first
    for _, part, offset, count in placed:
        if part != partition or offset != expected or offset < 0 or count < 1:
            return None
        expected = offset + count
    return partition, first, expected - 1


class FastLane:
    """Per-partition progress of the window agent and the lane's claims (module docstring)."""

    def __init__(self) -> None:
        self._generation = -1
        self._done: dict[int, int] = {}
        self._taken: dict[int, int] = {}
        self._closed: set[int] = set()
        self._claims: dict[int, Claim] = {}
        self.taken_by_lane = 0
        """Requests the lane committed (for tests and the bench)."""

    def _at(self, generation: int) -> None:
        if generation != self._generation:  # a rebalance: what we knew of the partitions is void
            self._generation = generation
            self._done.clear()
            self._taken.clear()
            self._closed.clear()

    # ------------------------------------------------------------------ the window agent's side

    async def before_batch(self, records: Sequence[InRecord], generation: int) -> None:
        """An agent batch is about to be decided: mark its records taken, then wait for the claims
        on its partitions to end (the lane's saved states are then the ones it decides from)."""
        self._at(generation)
        partitions = self._mark(records, self._taken)
        for partition in partitions:
            claim = self._claims.get(partition)
            if claim is not None:
                await asyncio.shield(claim.ended)

    def after_batch(self, records: Sequence[InRecord], generation: int) -> None:
        """An agent batch is saved: its records are done (ignored if a rebalance came in between)."""
        if generation == self._generation:
            self._mark(records, self._done)

    @staticmethod
    def _mark(records: Iterable[InRecord], marks: dict[int, int]) -> set[int]:
        partitions = set()
        for rec in records:
            partitions.add(rec.partition)
            if rec.offset > marks.get(rec.partition, -1):
                marks[rec.partition] = rec.offset
        return partitions

    # ------------------------------------------------------------------ the endpoint's side

    def claim(self, partition: int, first: int, last: int, generation: int, rebalancing: bool) -> Claim | None:
        """Take records ``first..last`` of ``partition`` for the lane, or None (the ordinary path)."""
        self._at(generation)
        if rebalancing or partition in self._closed or partition in self._claims:
            return None
        done = self._done.get(partition)
        if done is None or done != first - 1 or self._taken.get(partition) != done:
            return None
        claim = Claim(partition, first, last, generation, asyncio.get_running_loop().create_future())
        self._claims[partition] = claim
        self._taken[partition] = last
        return claim

    def release(self, claim: Claim, committed: bool) -> None:
        """End ``claim``: its records are done if ``committed``; if not, the lane stays closed for the
        partition until the next rebalance (the agent then applies what the lane did not save)."""
        del self._claims[claim.partition]
        if claim.generation == self._generation:
            if committed:
                self.taken_by_lane += 1
                if claim.last > self._done.get(claim.partition, -1):
                    self._done[claim.partition] = claim.last
            else:
                self._closed.add(claim.partition)
        if not claim.ended.done():
            claim.ended.set_result(None)
