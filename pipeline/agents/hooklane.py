"""Delivered-only accounting for the harness channels, inside the window agent's batch.

On a hook channel (``claude-code``, ``codex``, ``opencode``) a turn's pages are only *proposed*:
they go back to the waiting hook (:mod:`pipeline.agents.answers`), are kept in the session's
``emissions`` (so a redelivered turn proposes the same pages again), and are **not** recorded as
surfaced nor published on ``volunteered``. The hook then reports what it actually printed with a
delivery record on ``turns`` (same key, so it is applied before the session's next prompt); only
then are those pages recorded as surfaced and published, with the event id of the proposing turn,
so ``context_volunteer_events`` and ``volunteer stats`` count what the model saw. A page the hook
could not print (deadline, size cap) stays eligible for the session's next turns.

Turn context (docs/reference-behaviour.md §13.1): a harness turn proposes reflex **pointers** (no
gate, base confidence, rationale ``<arm> match "<display>"``) before its volunteered **pages**. Both
kinds are proposals and are accounted the same way; a delivered pointer is published with
``kind: "pointer"`` and logged with the reflex rationale and the base confidence, as the reference
logs them (§10).

Crash consistency is the window agent's: a delivery is applied from the saved state and re-applying
it yields the same events (same ``event_id``, the sink ignores repeats).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.session import SessionState, StepResult
from pipeline.core.types import VolunteeredPage
from topics.delivery import HOOK_CHANNELS, Delivery
from topics.records import Volunteered, event_id_for, rfc3339_ms

__all__ = ["HOOK_CHANNELS", "Proposal", "apply_delivery", "is_hook_channel", "propose", "volunteered_event"]


@dataclass(frozen=True, slots=True)
class Proposal:
    """The pages proposed to a hook for one turn. ``duplicate``: the turn number was at or below
    the session's last one (the pages are those first proposed for it); ``last_turn`` lets the hook
    resynchronise its numbering."""

    session_id: str
    turn: int
    pages: tuple[VolunteeredPage, ...]
    duplicate: bool
    last_turn: int
    pointers: tuple[VolunteeredPage, ...] = ()
    """The reflex pointers proposed before the pages (empty when the reflex is off)."""

    def items(self) -> list[tuple[str, VolunteeredPage]]:
        """``(kind, record)`` in block order: pointers, then pages."""
        return [("pointer", p) for p in self.pointers] + [("page", p) for p in self.pages]


def is_hook_channel(channel: str) -> bool:
    return channel in HOOK_CHANNELS


def propose(state: SessionState, session_id: str, result: StepResult) -> Proposal:
    """Undo the surfacing ``step`` just did for a hook-channel turn; the pages become a proposal.

    ``step`` records each page it returns as surfaced at this turn, and every such page is new to
    ``surfaced`` (surfaced slugs are excluded before the gate), so removing exactly the entries
    pointing at this turn restores the state of "nothing delivered yet". A duplicate turn left
    the state alone, so there is nothing to undo.
    """
    if not result.duplicate:
        for page in (*result.pointers, *result.pages):
            if state.surfaced.get(page.slug) == result.turn:
                del state.surfaced[page.slug]
    return Proposal(session_id, result.turn, tuple(result.pages), result.duplicate, state.last_turn,
                    tuple(result.pointers))


def apply_delivery(state: SessionState, delivery: Delivery) -> list[Volunteered]:
    """Record the delivered pages as surfaced (at the proposing turn) and return their events.

    Only pages the worker proposed for that turn count: a slug it did not propose, or a turn whose
    proposals are no longer kept, adds nothing.
    """
    proposed = [("pointer", p) for p in state.pointers.get(delivery.turn, ())]
    proposed += [("page", p) for p in state.emissions.get(delivery.turn, ())]
    wanted = set(delivery.slugs)
    at = rfc3339_ms(delivery.ts_ms)
    events = []
    for kind, page in proposed:
        if page.slug not in wanted:
            continue
        state.surfaced.setdefault(page.slug, delivery.turn)
        events.append(volunteered_event(delivery.session_id, delivery.turn, page, delivery.channel, at, kind))
    return events


def volunteered_event(session_id: str, turn: int, page: VolunteeredPage, channel: str, at: str,
                      kind: str = "page") -> Volunteered:
    """The ``volunteered`` record of one item given to a session at ``turn`` (a page or a pointer)."""
    return Volunteered(event_id=event_id_for(session_id, turn, page.source_id, page.slug, channel),
                       session_id=session_id, turn=turn, page=page, channel=channel, volunteered_at=at, kind=kind)
