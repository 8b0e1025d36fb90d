#!/usr/bin/env python3
"""Generate a deterministic, labelled transcript of synthetic chat sessions about a brain's pages.

Why: tuning needs labelled data whose labels were *not* made by the decision core. Here each turn is
written from an intent (which page it is about, and how it names it), and the labels come from that
intent alone:

- a turn that first brings up a page in its session expects that page (``expected_slugs``),
  whatever words it uses: the full title, an alias, the surname alone, the slug's word (``Atlas``
  for ``projects/atlas``), the name in lower case, a first name, or no name at all ("who is she
  again?"). Some of these the core resolves at high confidence, some only through low-confidence
  arms, some never, so recall really depends on the gate;
- pages brought up in the last three turns of the session, again or in passing, are acceptable
  (``acceptable_slugs``): fine to volunteer, not required;
- distractor turns use a page's surname or slug word for something else ("Lee from procurement",
  "the Atlas cluster"): the intent is not the page, so a page volunteered there counts against
  precision;
- filler turns name nothing.

The same seed, brain and options give byte-identical output.

    python scripts/gen_labelled_transcript.py --turns 20000 > /tmp/labelled-20k.jsonl
    python scripts/gen_labelled_transcript.py --turns 240 --seed 7 > pipeline/samples/labelled_transcript.jsonl
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from random import Random

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a plain script from anywhere
    sys.path.insert(0, str(ROOT))

from pipeline.braindir import iter_brain_dir  # noqa: E402
from pipeline.core.pages import Page  # noqa: E402

DEFAULT_BRAIN = ROOT / "pipeline" / "samples" / "brain"
START_MS = 1_767_603_600_000  # 2026-01-05T09:00:00Z
RECENT_TURNS = 3
"""Pages brought up this many turns back (or fewer) are acceptable at the current turn."""

_CJK = re.compile("[\u3040-\u30ff\u4e00-\u9fff\uac00-\ud7af]")
_PLAIN_ALIAS = re.compile(r"^[\w][\w .’'&-]*$")
_SURNAME = re.compile(r"^[A-Z][a-z’'-]{2,}$")
_SLUG_WORD = re.compile(r"^[a-z]{3,}$")

ABOUT_USER = [
    "Can you check whether {m} is on the agenda?",
    "Remind me what we decided about {m} last time.",
    "I have a call about {m} tomorrow, what should I know?",
    "Please pull up my notes on {m} before the review.",
    "Did the updated deck on {m} ever go out?",
    "what's the status with {m} these days?",
    "Any news on {m} this week?",
    "I need a short brief on {m} for the board pack.",
]
ABOUT_ASSISTANT = [
    "Last week's notes on {m} ask for a revised timeline.",
    "According to your notes, {m} needs a written summary first.",
    "The thread about {m} stalled after the second draft.",
    "{m} came up in the March review; the follow-up is still open.",
    "I found two open items that involve {m}.",
]
ABOUT_CJK = ["{m}さんの会議のメモを見せて", "{m}さんから返事はありましたか", "{m}について教えて"]
PASSING = [" Loop in {p} as well.", " {p} was copied on that thread.", " It came up at the {p} session too."]
DEICTIC = ["and who is she?", "who is he?", "is that her?", "and him?"]
"""No-name follow-ups: only stopwords, so the core has no candidate at all (the silences a sweep flags)."""
DISTRACT_SURNAME = [
    "{w} from procurement wants the numbers by the end of the day.",
    "My landlord, {w}, finally fixed the heating.",
    "There is a new barista called {w} downstairs.",
]
DISTRACT_WORD = [
    "We moved the staging database to the {w} cluster last night.",
    "The {w} plugin broke again after the update.",
    "I bought a {w} poster for the office.",
]
FILLER_USER = [
    "ok, sounds good", "Let me think about it and get back to you.", "thanks, that helps a lot",
    "can you make it shorter?", "What should I prioritise this afternoon?", "Send it before the Tuesday sync.",
    "I'll be offline for an hour.", "Please draft a polite reply.",
]
FILLER_ASSISTANT = [
    "Sure, here is a shorter version.", "Done. I kept the tone neutral.", "Noted; I will remind you later today.",
    "Here is a draft you can edit.", "That works. Anything else for the agenda?",
    "I moved it to tomorrow morning in Berlin time.",
]


@dataclass
class Mentionable:
    """The ways a page can be named, each tagged with its kind (for the mix and for the docs)."""

    page: Page
    forms: dict[str, list[str]] = field(default_factory=dict)


ABOUT_WEIGHTS = {"title": 34, "alias": 16, "surname": 14, "slug-word": 10, "lowercase": 10, "first-name": 8,
                 "no-name": 3}


def _aliases(page: Page) -> list[str]:
    raw = page.frontmatter.get("aliases")
    values = raw if isinstance(raw, list) else raw.split(",") if isinstance(raw, str) else []
    out = []
    for value in values:
        if isinstance(value, str):
            text = value.strip()
            if text and _PLAIN_ALIAS.match(text) and text.lower() != page.title.lower():
                out.append(text)
    return out


def mentionable(page: Page) -> Mentionable:
    """Every form this page can be named by; a form missing means the page has no such name."""
    m = Mentionable(page)
    title = page.title.strip()
    tokens = title.split()
    if title:
        m.forms["title"] = [title]
    aliases = _aliases(page)
    if aliases:
        m.forms["alias"] = aliases
    if page.type == "person" and len(tokens) >= 2 and _SURNAME.match(tokens[-1]):
        m.forms["surname"] = [tokens[-1]]
        m.forms["first-name"] = [tokens[0]]
    tail = page.slug.rsplit("/", 1)[-1]
    if _SLUG_WORD.match(tail) and tail != title.lower():
        m.forms["slug-word"] = [tail.capitalize()]
    if title and not _CJK.search(title) and title.lower() != title:
        m.forms["lowercase"] = [title.lower()]
    if page.type == "person":
        m.forms["no-name"] = [""]
    return m


@dataclass
class Line:
    session_id: str
    role: str
    text: str
    turn: int
    ts: int
    expected: list[str]
    acceptable: list[str]

    def to_json(self) -> bytes:
        record: dict[str, object] = {"session_id": self.session_id, "role": self.role, "text": self.text,
                                     "turn": self.turn, "ts": self.ts, "channel": "synthetic",
                                     "expected_slugs": self.expected}
        if self.acceptable:
            record["acceptable_slugs"] = self.acceptable
        return orjson.dumps(record)


class Generator:
    def __init__(self, pages: list[Mentionable], seed: int) -> None:
        self.pages = pages
        self.rng = Random(seed)
        self.surnames = sorted({f for p in pages for f in p.forms.get("surname", [])})
        self.words = sorted({f for p in pages for f in p.forms.get("slug-word", [])})

    def _about_text(self, role: str, page: Mentionable) -> tuple[str, str]:
        kinds = [k for k in ABOUT_WEIGHTS if k in page.forms]
        kind = self.rng.choices(kinds, weights=[ABOUT_WEIGHTS[k] for k in kinds])[0]
        if kind == "no-name":
            return self.rng.choice(DEICTIC), kind
        name = self.rng.choice(page.forms[kind])
        if _CJK.search(name):
            return self.rng.choice(ABOUT_CJK).format(m=name), kind
        if kind in ("title", "alias") and page.page.type in ("person", "company") and self.rng.random() < 0.15:
            name += "'s team"
        templates = ABOUT_USER if role == "user" else ABOUT_ASSISTANT
        return self.rng.choice(templates).format(m=name), kind

    def session(self, index: int, length: int, start_ms: int) -> list[Line]:
        rng = self.rng
        sid = f"s{index:05d}"
        topics = rng.sample(self.pages, k=min(len(self.pages), rng.randint(2, 5)))
        introduced: set[str] = set()
        recent: list[set[str]] = []  # pages brought up at each earlier turn
        lines: list[Line] = []
        ts = start_ms
        for number in range(1, length + 1):
            role = "user" if number % 2 else "assistant"
            brought_up: set[str] = set()
            expected: set[str] = set()
            roll = rng.random()
            if roll < 0.5:
                fresh = [p for p in topics if p.page.slug not in introduced]
                page = rng.choice(fresh) if fresh and rng.random() < 0.75 else rng.choice(topics)
                text, _kind = self._about_text(role, page)
                brought_up.add(page.page.slug)
                if page.page.slug not in introduced:
                    expected.add(page.page.slug)
                    introduced.add(page.page.slug)
                if rng.random() < 0.25 and not _CJK.search(text):
                    other = rng.choice(self.pages)
                    if other.page.slug != page.page.slug and "title" in other.forms:
                        text += rng.choice(PASSING).format(p=other.forms["title"][0])
                        brought_up.add(other.page.slug)
            elif roll < 0.56 and (self.surnames or self.words):
                use_surname = bool(self.surnames) and (not self.words or rng.random() < 0.5)
                word = rng.choice(self.surnames if use_surname else self.words)
                text = rng.choice(DISTRACT_SURNAME if use_surname else DISTRACT_WORD).format(w=word)
            else:
                text = rng.choice(FILLER_USER if role == "user" else FILLER_ASSISTANT)
            acceptable = set().union(*recent[-RECENT_TURNS:], brought_up) - expected if recent or brought_up else set()
            lines.append(Line(sid, role, text, number, ts, sorted(expected), sorted(acceptable)))
            recent.append(brought_up)
            ts += rng.randint(4_000, 60_000)
        return lines


def generate(brain: Path, turns: int, seed: int, source: str) -> list[Line]:
    pages, _aliases_rows = iter_brain_dir(brain)
    usable = [mentionable(p) for p in pages if not p.deleted and p.source_id == source and p.title.strip()]
    if not usable:
        raise SystemExit(f"{brain}: no live pages in source {source!r}")
    gen = Generator(usable, seed)
    lines: list[Line] = []
    index = 0
    while len(lines) < turns:
        index += 1
        length = min(gen.rng.randint(8, 20), turns - len(lines))
        start = START_MS + gen.rng.randint(0, 6 * 3600 * 1000)
        lines.extend(gen.session(index, length, start))
    # Sessions overlap in time, as on a real topic: interleave them by timestamp (stable).
    lines.sort(key=lambda line: (line.ts, line.session_id, line.turn))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brain", type=Path, default=DEFAULT_BRAIN, help="brain directory (default: the bundled sample)")
    parser.add_argument("--turns", type=int, default=20_000, help="number of turns (default 20000)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--source", default="default", help="brain source whose pages the sessions are about")
    parser.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    args = parser.parse_args(argv)
    if args.turns < 1:
        parser.error("--turns must be at least 1")
    data = b"".join(line.to_json() + b"\n" for line in generate(args.brain, args.turns, args.seed, args.source))
    if args.output:
        args.output.write_bytes(data)
    else:
        sys.stdout.buffer.write(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
