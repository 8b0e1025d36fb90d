"""The sticky-assignment patch, on Faust's own assignor classes: a worker over its share gives back
first the partitions a woken worker claims (issue 27, seed 883645225), and nothing changes for a
new worker; installed once, refused when Faust's step changed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from faust.assignor.client_assignment import CopartitionedAssignment
from faust.assignor.copartitioned_assignor import CopartitionedAssignor

from pipeline.compat import sticky_assignment
from pipeline.internals import CompatError


def _assign(claims: dict[str, set[int]], *, patched: bool, partitions: int = 4) -> dict[str, set[int]]:
    clients = {member: CopartitionedAssignment(actives=set(actives), topics={"turns"})
               for member, actives in claims.items()}
    assignor = CopartitionedAssignor({"turns"}, clients, partitions, replicas=0)
    step = sticky_assignment.wrap(CopartitionedAssignor.get_assignment.__wrapped__
                                  if sticky_assignment.installed() else CopartitionedAssignor.get_assignment)
    unpatched = getattr(CopartitionedAssignor.get_assignment, "__wrapped__", CopartitionedAssignor.get_assignment)
    result = step(assignor) if patched else unpatched(assignor)
    return {member: set(assignment.actives) for member, assignment in result.items()}


@pytest.mark.parametrize("woken_first", [True, False])
def test_the_woken_worker_gets_back_what_it_held_and_the_other_keeps_its_own(woken_first: bool) -> None:
    # worker "a" held 0 and 2, took 1 and 3 over while "b" was paused; "b" woke claiming 1 and 3
    claims = {"b": {1, 3}, "a": {0, 1, 2, 3}} if woken_first else {"a": {0, 1, 2, 3}, "b": {1, 3}}
    assert _assign(claims, patched=True) == {"a": {0, 2}, "b": {1, 3}}


def test_without_the_patch_the_outcome_depends_on_the_members_order() -> None:
    """What seed 883645225 saw: the woken worker listed first lost 3 to the trim and got 0, which it
    had never held, while the other kept 3 and lost its own 0: both read a partition whole."""
    assert _assign({"b": {1, 3}, "a": {0, 1, 2, 3}}, patched=False) == {"a": {2, 3}, "b": {0, 1}}


def test_a_new_worker_is_given_partitions_as_faust_gives_them() -> None:
    claims: dict[str, set[int]] = {"a": {0, 1, 2, 3}, "new": set()}
    assert _assign(claims, patched=True) == _assign(claims, patched=False)


@pytest.mark.parametrize("claims", [
    {"a": {0, 1, 2, 3, 4, 5}, "b": {1, 3}, "c": {5}},
    {"a": {0, 1, 2, 3}, "b": {0, 1, 2, 3}},  # two over their share claiming the same ones
    {"a": {0, 1}, "b": {2, 3}},
])
def test_every_partition_is_assigned_once_and_shares_are_balanced(claims: dict[str, set[int]]) -> None:
    partitions = 1 + max(p for ps in claims.values() for p in ps)
    result = _assign(claims, patched=True, partitions=partitions)
    assigned = sorted(p for ps in result.values() for p in ps)
    assert assigned == list(range(partitions))
    sizes = [len(ps) for ps in result.values()]
    assert max(sizes) - min(sizes) <= 1


def test_give_back_stops_at_the_share() -> None:
    clients: dict[str, Any] = {"a": CopartitionedAssignment(actives={0, 1, 2, 3, 4, 5}, topics={"t"}),
                               "b": CopartitionedAssignment(actives={0, 1, 2, 3}, topics={"t"})}
    given = sticky_assignment.give_back_contested(clients, capacity=3)
    assert given == [("a", 0), ("a", 1), ("a", 2), ("b", 3)]  # "b" keeps 0-2, which "a" gave back
    assert clients["a"].actives == {3, 4, 5} and clients["b"].actives == {0, 1, 2}


def test_install_patches_faust_once() -> None:
    sticky_assignment.install()
    patched = CopartitionedAssignor.get_assignment
    assert sticky_assignment.installed()
    sticky_assignment.install()
    assert CopartitionedAssignor.get_assignment is patched


def test_a_changed_step_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def changed(self: Any, extra: int) -> None:  # a later Faust with another signature
        return None

    monkeypatch.setattr(CopartitionedAssignor, "get_assignment", changed)
    with pytest.raises(CompatError, match=r"sticky-assignment: .*get_assignment is not the method"):
        sticky_assignment.install()
    assert CopartitionedAssignor.get_assignment is changed


# ----------------------------------------------------------------------------- the leader's caught-up rule


def _assign_with_backlog(claims: dict[str, set[int]], leader: str | None, backlog: dict[int, int],
                         monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    monkeypatch.setattr(sticky_assignment, "_backlog", lambda: (leader, backlog))
    return _assign(claims, patched=True)


def test_the_leader_keeps_the_partitions_whose_records_wait_and_gives_back_caught_up_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 952049092's shape: the survivor "a" took a killed worker's 1 and 3 with records waiting,
    then a replacement joined; the waiting ones stay (no second move), its own caught-up 0 and 2 go."""
    claims: dict[str, set[int]] = {"a": {0, 1, 2, 3}, "new": set()}
    backlog = {0: 0, 1: 480, 2: 3, 3: 611}
    assert _assign_with_backlog(claims, "a", backlog, monkeypatch) == {"a": {1, 3}, "new": {0, 2}}
    # the other way round too: whichever partitions wait are the ones kept
    backlog = {0: 700, 1: 0, 2: 512, 3: 1}
    assert _assign_with_backlog(claims, "a", backlog, monkeypatch) == {"a": {0, 2}, "new": {1, 3}}


def test_without_the_rule_faust_moves_a_partition_whose_records_wait() -> None:
    """Faust's trim (``set.pop``) gives the new worker 0 and 1 whatever waits: with the backlog of the
    test above, partition 1's 480 waiting records would move and wait for a second recovery."""
    assert _assign({"a": {0, 1, 2, 3}, "new": set()}, patched=False) == {"a": {2, 3}, "new": {0, 1}}


def test_the_rule_leaves_the_choice_to_faust_when_a_backlog_is_unknown_or_the_member_is_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    claims: dict[str, set[int]] = {"a": {0, 1, 2, 3}, "new": set()}
    faust_own = _assign(claims, patched=False)
    assert _assign_with_backlog(claims, "a", {0: 0, 1: 480, 2: 3}, monkeypatch) == faust_own  # 3 unknown
    assert _assign_with_backlog(claims, "someone-else", {0: 0, 1: 480, 2: 3, 3: 611}, monkeypatch) == faust_own
    assert _assign_with_backlog(claims, None, {}, monkeypatch) == faust_own


def test_contested_partitions_go_back_before_the_caught_up_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """A woken worker's claim still wins: "a" gives back 1 and 3, which "b" claims, although they wait."""
    claims = {"a": {0, 1, 2, 3}, "b": {1, 3}}
    assert _assign_with_backlog(claims, "a", {0: 0, 1: 900, 2: 0, 3: 900}, monkeypatch) == {"a": {0, 2}, "b": {1, 3}}


def test_give_back_caught_up_stops_at_the_share() -> None:
    clients: dict[str, Any] = {"a": CopartitionedAssignment(actives={0, 1, 2, 3, 4, 5}, topics={"t"})}
    given = sticky_assignment.give_back_caught_up(clients, 4, "a", {0: 5, 1: 0, 2: 9, 3: 0, 4: 7, 5: 1})
    assert sorted(given) == [1, 3] and clients["a"].actives == {0, 2, 4, 5}
    assert sticky_assignment.give_back_caught_up(clients, 4, "a", {p: 0 for p in range(6)}) == []  # within share


def test_backlog_is_read_from_aiokafkas_assignment_and_fausts_committed_offsets() -> None:
    """On aiokafka's real subscription state, after the revocation that precedes the leader's
    assignment: the old assignment's high watermarks minus Faust's committed offsets, summed per
    partition number over the input topics; a partition never fetched makes the backlog unknown."""
    from aiokafka.consumer.subscription_state import SubscriptionState
    from aiokafka.structs import TopicPartition

    from pipeline.compat import faust_internals

    faust_internals.install()
    tps = [TopicPartition(t, p) for t in ("turns", "volunteered", "other") for p in (0, 1)]
    committed = {TopicPartition("turns", 0): 100, TopicPartition("turns", 1): 12,
                 TopicPartition("volunteered", 0): 4}  # volunteered 1: no commit yet

    async def go() -> list[tuple[str | None, dict[int, int]]]:  # aiokafka's state wants a running loop
        subscription = SubscriptionState()
        subscription.subscribe({"turns", "volunteered", "other"})
        subscription.assign_from_subscribed(set(tps))
        assignment = subscription.subscription.assignment
        for tp, highwater in zip(tps, (100, 40, 10, 5, 999, 999), strict=True):
            assignment.state_value(tp).highwater = highwater
        coordinator = type("Coordinator", (), {"member_id": "m-1"})()
        client = type("Client", (), {"_subscription": subscription, "_coordinator": coordinator})()
        thread = type("Thread", (), {"_consumer": client, "thread_loop": None})()
        consumer = type("Consumer", (), {"_thread": thread, "_committed_offset": committed})()
        app = type("App", (), {"consumer": consumer})()
        subscription.begin_reassignment()  # the group is rebalancing: the leader assigns now
        read = sticky_assignment.backlog_of(app, lambda: {"turns", "volunteered"})
        seen = [read()]
        assignment.state_value(TopicPartition("turns", 1)).highwater = None  # never fetched
        seen.append(read())
        return seen

    assert asyncio.run(go()) == [("m-1", {0: 0 + 6, 1: 28 + 5}), ("m-1", {})]
    assert sticky_assignment.backlog_of(type("App", (), {"consumer": object()})(), set)() == (None, {})
