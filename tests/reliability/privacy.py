"""Where conversation text could leak, and the brain's private content: helpers of the privacy test.

Conversation text may live only in ``turns`` (and ``turns-dlq``, which holds rejected records as they
came). Everything else — every PostgreSQL table, every other topic including Faust's changelog of the
session table, every log line at INFO and above — is collected here as *strings*: JSON documents
(records, the changelog's state after its binary header, JSON log lines) are decoded and every
string in them taken, because a text with a quote or a newline is escaped in JSON and a raw byte
search would miss it. Strings are compared case-folded with whitespace collapsed, so a lowercased or
normalised copy of a turn counts as a leak too. :func:`find_words` looks for single words (the
canaries planted in the workload's turns), so even one word of a conversation is caught.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg import sql

from pipeline.settings import Settings
from topics.clients import make_admin
from topics.io import read_all

_WS = re.compile(r"\s+")
LOG_LEVELS_SHOWN = ("info", "warning", "warn", "error", "critical", "exception")


def fold(text: str) -> str:
    return _WS.sub(" ", text).strip().casefold()


def strings_in(value: Any) -> Iterator[str]:
    """Every string (keys included) inside a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def strings_of_bytes(raw: bytes | None) -> Iterator[str]:
    """The strings of a record: JSON (possibly after a binary header) decoded, else the text itself."""
    if not raw:
        return
    for start in {raw.find(b"{"), raw.find(b"[")} - {-1}:
        try:
            yield from strings_in(orjson.loads(raw[start:]))
            return
        except orjson.JSONDecodeError:
            continue
    yield raw.decode("utf-8", "replace")


def database_strings(database_url: str) -> Iterator[tuple[str, str]]:
    """``(table, text)`` for every text-like value of every user table."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema')").fetchall()
        for schema, table in tables:
            query = sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(schema), sql.Identifier(table))
            for row in conn.execute(query):
                for value in row:
                    if isinstance(value, str):
                        yield table, value
                    elif isinstance(value, dict | list):
                        yield from ((table, s) for s in strings_in(value))
                    elif isinstance(value, bytes):
                        yield from ((table, s) for s in strings_of_bytes(value))


async def _topics_with_prefix(settings: Settings, prefixes: tuple[str, ...]) -> list[str]:
    admin = make_admin(settings)
    await admin.start()
    try:
        return sorted(t for t in await admin.list_topics() if t.startswith(prefixes))
    finally:
        await admin.close()


async def topic_strings(settings: Settings, prefixes: tuple[str, ...],
                        exclude: Iterable[str]) -> list[tuple[str, str]]:
    """``(topic, text)`` for keys and values of every record of every topic named with ``prefixes``."""
    skip = set(exclude)
    out: list[tuple[str, str]] = []
    for topic in await _topics_with_prefix(settings, prefixes):
        if topic in skip:
            continue
        for rec in await read_all(settings, topic, idle_s=1.0, timeout_s=120):
            out.extend((topic, s) for s in strings_of_bytes(rec.key))
            out.extend((topic, s) for s in strings_of_bytes(rec.value))
    return out


def log_strings(logs: Iterable[str]) -> Iterator[tuple[str, str]]:
    """``(level, text)`` of every log line at INFO and above (non-JSON lines, e.g. tracebacks, count too)."""
    for log in logs:
        for line in log.splitlines():
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                yield "raw", line
                continue
            if not isinstance(entry, dict):
                yield "raw", line
                continue
            level = str(entry.get("level", "")).lower()
            if level and level not in LOG_LEVELS_SHOWN:
                continue
            yield from ((level or "raw", s) for s in strings_in(entry))


def find_leaks(texts: Iterable[str], haystack: Iterable[tuple[str, str]], min_len: int = 20) -> list[tuple[str, str]]:
    """``(where, text)`` for every conversation text (>= ``min_len`` chars) found inside a haystack string."""
    originals = {fold(t): t for t in texts if len(t) >= min_len}
    needles = sorted(originals, key=len)
    seen: set[tuple[str, str]] = set()
    leaks = []
    for where, hay in haystack:
        if len(hay) < min_len:
            continue
        folded = fold(hay)
        key = (where, folded)
        if key in seen:
            continue
        seen.add(key)
        for needle in needles:
            if len(needle) > len(folded):
                break
            if needle in folded:
                leaks.append((where, originals[needle]))
    return leaks


def find_words(words: Iterable[str], haystack: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(where, word)`` for every word (case-folded) found inside a haystack string: the canary check,
    which catches a single word of a turn where :func:`find_leaks` needs a whole text."""
    pattern = re.compile("|".join(re.escape(fold(w)) for w in sorted(words, key=len, reverse=True)))
    leaks: set[tuple[str, str]] = set()
    for where, hay in haystack:
        for match in pattern.finditer(fold(hay)):
            leaks.add((where, match.group(0)))
    return sorted(leaks)


# ----------------------------------------------------------------------------- the brain's private content

_TAKES = re.compile(r"<!--- gbrain:takes:begin -->(.*?)<!--- gbrain:takes:end -->", re.S)
_FACTS = re.compile(r"<!--- gbrain:facts:begin -->(.*?)<!--- gbrain:facts:end -->", re.S)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def private_strings(brain_dir: Path) -> tuple[set[str], set[str]]:
    """``(slugs with private content, private strings)``: every take in a takes fence and every claim
    of a facts row whose visibility is not ``world``, from the brain's page bodies."""
    slugs: set[str] = set()
    found: set[str] = set()
    for line in (brain_dir / "pages.jsonl").read_text(encoding="utf-8").splitlines():
        page = orjson.loads(line)
        body = page.get("compiled_truth") or ""
        before = len(found)
        for fence in _TAKES.findall(body):
            for row in fence.splitlines():
                cells = _cells(row)
                if len(cells) >= 2 and cells[0].isdigit() and len(cells[1]) >= 12:
                    found.add(cells[1])
        for fence in _FACTS.findall(body):
            for row in fence.splitlines():
                cells = _cells(row)
                if len(cells) >= 5 and cells[0].isdigit() and cells[4] != "world" and len(cells[1]) >= 12:
                    found.add(cells[1])
        if len(found) > before:
            slugs.add(page["slug"])
    return slugs, found


RATIONALE = re.compile(
    r'(?:alias match|exact title match|surname match|exact CJK title/slug match|slug match) "(?P<display>.*)"'
    r"(?:; mentioned in \d+ of last \d+ turns|; mentioned in the newest turn)?(?:; assistant-introduced)?",
    re.S)


def rationale_is_template(rationale: str, display: str) -> bool:
    """reference-behaviour.md §7.1: the arm text with the display label, then the fixed mention / assistant clauses."""
    match = RATIONALE.fullmatch(rationale)
    return match is not None and match.group("display") == display
