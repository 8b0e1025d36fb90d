"""A deterministic multi-session workload for the crash, outage and privacy tests.

Sessions are the 450 conformance watch sessions (every line a turn, reference-behaviour.md §9), renamed and reused as
often as needed, so pages really fire against the conformance brain. Every session is one of two
producer kinds, chosen by the seed:

- **numbered**: the producer sends ``turn`` numbers, sometimes with gaps (allowed by docs/contracts.md);
- **unnumbered**: no ``turn`` field, so the pipeline numbers the turns itself (the crash-sensitive path).

Half the sessions carry a ``ts`` (then ``volunteered_at`` is exact and checked), some name a channel.
Turns of many sessions are interleaved the way live traffic is: a pool of concurrently active
sessions, one random active session speaks next, a finished session is replaced by a new one. Each
session's own order is kept, which is all the pipeline promises to respect.

With ``canary_share`` > 0, that share of the turns ends with a made-up person's name of two
unique invented words ("… asked Zovatrik Melquanor."): a name is an entity candidate, so it enters
the session state, which is exactly where the privacy test looks for it, word by word.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from pipeline.core.window import parse_watch_line
from tests.conftest import CONFORMANCE
from topics.records import Turn

BASE_TS_MS = 1_790_000_000_000
CHANNELS = (None, None, None, "cli", "bench")  # None = the worker's default channel


@dataclass(frozen=True, slots=True)
class TurnMeta:
    """What the verifier needs to know about one produced turn besides its record."""

    number: int  # the turn number the pipeline must give it (explicit or counted)
    ts_ms: int | None
    channel: str | None


@dataclass
class Workload:
    """Turn records in production order, plus what each one is."""

    turns: list[Turn]
    meta: dict[tuple[str, int], TurnMeta] = field(default_factory=dict)  # (session, number) -> meta
    numbered_sessions: int = 0
    unnumbered_sessions: int = 0
    canaries: set[str] = field(default_factory=set)  # invented words planted in turn texts

    @property
    def sessions(self) -> int:
        return self.numbered_sessions + self.unnumbered_sessions

    def lines(self) -> list[bytes]:
        return [t.to_json() for t in self.turns]

    def texts(self) -> set[str]:
        return {t.text for t in self.turns}


def conformance_dialogues(path: Path | None = None) -> list[list[tuple[str, str]]]:
    """Every watch session of the conformance corpus as ``[(role, text), ...]`` (empty ones dropped)."""
    out = []
    for line in (path or CONFORMANCE / "cases-watch.jsonl").read_bytes().splitlines():
        case = orjson.loads(line)
        turns = [parsed for raw in case["lines"] if (parsed := parse_watch_line(raw)) is not None]
        if turns:
            out.append(turns)
    return out


_CONSONANTS = "bdfgklmnprstvxz"
_VOWELS = "aeiou"


def canary_word(rng: random.Random, taken: set[str]) -> str:
    """A capitalised invented word of 8 letters that no earlier call returned."""
    while True:
        word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(4)).capitalize()
        if word not in taken:
            taken.add(word)
            return word


def build_workload(turns_target: int, *, seed: int, concurrent: int = 300, numbered_share: float = 0.5,
                   prefix: str = "w", canary_share: float = 0.0) -> Workload:
    """At least ``turns_target`` turns (whole sessions only), deterministic for a given seed."""
    rng = random.Random(seed)
    canary_rng = random.Random(seed + 1)  # its own stream: the sessions stay those of the seed
    dialogues = conformance_dialogues()
    work = Workload([])
    planned = 0
    pending: list[list[Turn]] = []
    while planned < turns_target:
        index = work.sessions
        dialogue = dialogues[rng.randrange(len(dialogues))]
        sid = f"{prefix}{seed}-{index:06d}"
        numbered = rng.random() < numbered_share
        with_ts = rng.random() < 0.5
        channel = rng.choice(CHANNELS)
        number = rng.randint(1, 3) if numbered else 1
        turns = []
        for i, (role, text) in enumerate(dialogue):
            ts = BASE_TS_MS + index * 7_919 + i * 1_000 if with_ts else None
            if canary_rng.random() < canary_share:
                text = f"{text} asked {canary_word(canary_rng, work.canaries)} {canary_word(canary_rng, work.canaries)}."
            turns.append(Turn(sid, role, text, number if numbered else None, ts, None, channel))
            work.meta[(sid, number)] = TurnMeta(number, ts, channel)
            number += rng.choice((1, 1, 1, 2)) if numbered else 1
        if numbered:
            work.numbered_sessions += 1
        else:
            work.unnumbered_sessions += 1
        planned += len(turns)
        pending.append(turns)
    # interleave: a pool of active sessions, a random one speaks next
    queue = pending[::-1]
    active: list[list[Turn]] = []
    while queue or active:
        while queue and len(active) < concurrent:
            active.append(queue.pop())
        pick = rng.randrange(len(active))
        session = active[pick]
        work.turns.append(session.pop(0))
        if not session:
            active[pick] = active[-1]
            active.pop()
    return work
