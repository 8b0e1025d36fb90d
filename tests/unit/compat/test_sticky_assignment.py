"""The sticky-assignment patch, on Faust's own assignor classes: a worker over its share gives back
first the partitions a woken worker claims (issue 27, seed 883645225), and nothing changes for a
new worker; installed once, refused when Faust's step changed."""

from __future__ import annotations

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
