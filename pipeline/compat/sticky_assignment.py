"""When a worker holds more partitions than its share, give back first the ones another worker claims.

Faust's assignor (faust-streaming 0.15.3, ``CopartitionedAssignor.get_assignment``) is sticky: each
member reports the partitions it had, and the leader keeps them where it can. When a worker holds
more than its share it trims with ``CopartitionedAssignment.unassign_extras``, which drops
*arbitrary* partitions (``set.pop``); partitions two members both claim are then taken from
whichever member comes first. That is the usual shape after a zombie wakes: while it was paused
another worker took its partitions over for a short generation (and had barely begun to read their
changelogs), and the woken worker rejoins claiming the partitions it held, whose sessions it still
has in memory. In issue 27's seed 883645225 the trim kept partitions 2 and 3 on the worker that
had held 0 and 2 for the whole run, and gave the woken worker 0 and 1: each of them then read a
whole changelog partition it did not have (3,000 records, 2.4-2.9 s at load 8), where keeping the
old split would have left almost nothing to read (the session table starts where its copy ends,
``ChangelogCoverage``), and a row waited 13.3 s against the 13 s bound.

:func:`install` wraps ``get_assignment``: before Faust's own trim, a member over its share gives
back the partitions another member also claims, lowest first, until it is within its share or has
none of those left. Faust's steps then run unchanged (trim, resolve what is still claimed twice,
hand out what is unassigned), so every assignment it makes is one Faust could have made; only which
of a member's extras goes back is chosen. A new or restarted worker claims nothing and is unaffected.

Then, for the leader's own member only (the one process whose consumer it can read), the extras it
still holds go back caught-up first: the partitions with the fewest records not yet committed
(:func:`give_back_caught_up`, lag read by :func:`backlog_of`). A partition that moves pauses for the
join and a whole recovery on its new owner; one that stays resumes from its end (the session
table's ``ChangelogCoverage``). After a kill, the survivor takes the dead worker's partitions with
the records that waited through the session timeout; when the replacement joins one rebalance later
(issue 27, seed 952049092: 0.8 s after the survivor got them, a row then waited 13.3 s against the
13 s bound), Faust's trim gives back arbitrary ones, often those waiting records again. Giving back
the caught-up ones moves the pause onto rows that have not waited yet. Without a lag for each of its
partitions (none fetched yet, or a consumer it cannot read) the leader leaves the choice to Faust.
"""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from faust.assignor import copartitioned_assignor
from faust.assignor.client_assignment import CopartitionedAssignment

from pipeline.compat.reassignment import aiokafka_client
from pipeline.internals import CompatError, installed_versions, internals, require

log = logging.getLogger(__name__)

PATCH = "sticky-assignment"

_MARK = "_volunteer_gives_back_contested"

ASSIGNOR_PARTS = ("_client_assignments", "replicas", "num_partitions", "_num_clients", "min_capacity", "max_capacity")
"""What :func:`give_back_contested` reads of the assignor instance (set in its constructor)."""


def share(assignor: Any) -> int:
    """The most active partitions Faust's trim leaves a member (``get_assignment``'s own rule)."""
    if assignor.replicas == 0 and assignor.num_partitions > 0 and assignor.num_partitions >= assignor._num_clients:
        return int(assignor.min_capacity)
    return int(assignor.max_capacity)


def give_back_contested(clients: MutableMapping[str, Any], capacity: int) -> list[tuple[str, int]]:
    """Make every member over ``capacity`` active partitions give back the ones another member also
    claims (lowest first), while it is over; returns what was given back as (member, partition)."""
    claims = Counter(p for client in clients.values() for p in client.actives)
    given: list[tuple[str, int]] = []
    for member, client in clients.items():
        excess = len(client.actives) - capacity
        if excess <= 0:
            continue
        for partition in sorted(p for p in client.actives if claims[p] > 1)[:excess]:
            client.actives.discard(partition)
            claims[partition] -= 1
            given.append((member, partition))
    return given


def give_back_caught_up(clients: MutableMapping[str, Any], capacity: int, member: str | None,
                        backlog: Mapping[int, int]) -> list[int]:
    """Make ``member``, when over ``capacity``, give back its partitions with the least ``backlog``
    (then the highest numbered) until within it; nothing unless every one of them has a backlog."""
    client = clients.get(member) if member is not None else None
    if client is None or len(client.actives) <= capacity or any(p not in backlog for p in client.actives):
        return []
    extras = sorted(client.actives, key=lambda p: (backlog[p], -p))[:len(client.actives) - capacity]
    for partition in extras:
        client.actives.discard(partition)
    return extras


Backlog = Callable[[], tuple[str | None, dict[int, int]]]
"""The leader's own member id and its records not yet committed per partition number."""

_backlog: Backlog | None = None


def backlog_of(app: Any, topics: Callable[[], set[str]]) -> Backlog:
    """Read ``app``'s aiokafka consumer: its member id, and per partition number the records of
    ``topics()`` past the committed offset (the high watermark of the latest Fetch; the assignment
    being replaced is still the consumer's while the leader assigns). Never raises: ``(None, {})``."""
    def read() -> tuple[str | None, dict[int, int]]:
        try:
            client = aiokafka_client(app)
            member = client._coordinator.member_id
            assignment = client._subscription.subscription.assignment
            committed = internals().committed_offsets(app.consumer)
            wanted = topics()
            out: dict[int, int] = {}
            for tp in assignment.tps:
                if tp.topic not in wanted:
                    continue
                state = assignment.state_value(tp)
                highwater = state.highwater
                if highwater is None or highwater < 0:
                    return member, {}  # not fetched yet: no backlog known for it
                done = committed.get(tp)
                if done is None:
                    done = state.position if state.has_valid_position else 0
                out[tp.partition] = out.get(tp.partition, 0) + max(0, int(highwater) - int(done))
            return str(member), out
        except Exception:  # no consumer yet, mid-stop, or other internals: Faust's own choice
            return None, {}

    return read


def wrap(get_assignment: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``CopartitionedAssignor.get_assignment`` that gives back contested extras first, then the
    leader's caught-up ones (module doc)."""

    def _get_assignment(self: Any) -> Any:
        require(PATCH, self, *ASSIGNOR_PARTS)
        capacity = share(self)
        give_back_contested(self._client_assignments, capacity)
        if _backlog is not None:
            member, backlog = _backlog()
            given = give_back_caught_up(self._client_assignments, capacity, member, backlog)
            if given:
                log.info("assignment: the leader gives back its most caught-up partitions %s (backlog %s)",
                         given, {p: backlog[p] for p in sorted(backlog)})
        return get_assignment(self)

    setattr(_get_assignment, _MARK, True)
    _get_assignment.__wrapped__ = get_assignment  # type: ignore[attr-defined]  # Faust's own, for tests
    return _get_assignment


def installed() -> bool:
    """True once Faust's assignor carries the wrap (in this process)."""
    cls = copartitioned_assignor.CopartitionedAssignor
    return bool(getattr(getattr(cls, "get_assignment", None), _MARK, False))


def install(backlog: Backlog | None = None) -> None:
    """Patch Faust's copartitioned assignor once per process; :class:`CompatError` if its step is not
    the method ``get_assignment(self)`` this wraps or a member's assignment keeps no ``actives`` set.
    ``backlog`` (:func:`backlog_of` of the process's one app) turns on the leader's caught-up rule."""
    global _backlog
    if backlog is not None:
        _backlog = backlog
    if installed():
        return
    cls = copartitioned_assignor.CopartitionedAssignor
    require(PATCH, cls, methods=("get_assignment", "_assign"))
    require(PATCH, CopartitionedAssignment, methods=("unassign_extras",))
    if "actives" not in CopartitionedAssignment.__init__.__code__.co_varnames:
        raise CompatError(f"compat patch {PATCH}: faust's CopartitionedAssignment keeps no actives "
                          f"({installed_versions()})")
    current = cls.get_assignment
    if inspect.iscoroutinefunction(current) or list(inspect.signature(current).parameters) != ["self"]:
        raise CompatError(f"compat patch {PATCH}: faust's CopartitionedAssignor.get_assignment is not the "
                          f"method (self) it wraps ({installed_versions()})")
    setattr(cls, "get_assignment", wrap(current))  # noqa: B010 (a method, patched)
