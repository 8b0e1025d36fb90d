"""Hypothesis strategies for hostile and broken ``turns`` records, each labelled with what must happen.

Every generated record is built *as* one kind, so its fate is known without asking the code under
test: a **good** record is a valid Turn (possibly with SQL / markdown injection in every string
field, NUL and control characters in its text, odd role casing, numbered or not); a **bad** record
is a good one with exactly one defect (or bytes that cannot be a JSON object) and carries the set of
dead-letter ``error`` codes docs/contracts.md allows for that defect. The brain extras are pages whose slugs,
titles and bodies are hostile too, so such strings also travel through the decision core into the
topic and the table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import orjson
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pipeline.core.normalize import normalize_alias
from tests.reliability.workload import conformance_dialogues
from topics.delivery import HOOK_CHANNELS

MAX_TEXT_BYTES = 2048
"""``VOLUNTEER_MAX_TEXT_BYTES`` of the fuzzed worker: low, so oversized texts are cheap to make."""

INJECTIONS = (
    "'; DROP TABLE context_volunteer_events; --",
    '" OR 1=1 --',
    "Robert'); DELETE FROM pages;--",
    "$$; SELECT pg_sleep(10); $$",
    "%s %b %(x)s {0} {}",
    "\\x00 \\u0000 \\\\",
    "[click](javascript:alert(1))",
    "**bold** _it_ `code` <script>alert(1)</script>",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "<!--- gbrain:takes:begin -->",
    "${jndi:ldap://x/a}",
    "{{7*7}}",
    "\u202eevil reversed",
    "😀🔥 emoji",
    "E'\\\\' || chr(0) || '",
)

# Pages with hostile slugs, titles and bodies, appended to the conformance brain for this test.
EXTRA_PAGES = (
    {"slug": "companies/quill'); DROP TABLE pages;--", "title": "Quillfeather Dynamics", "type": "company",
     "compiled_truth": "**Quillfeather** builds [drones](javascript:alert(1)) <script>x</script>.\n",
     "aliases": ["Quillfeather"]},
    {"slug": 'people/zebulon-"z"-marchetti', "title": "Zebulon\nMarchetti", "type": "person",
     "compiled_truth": "<!--- gbrain:takes:begin -->\n| # | take | kind | confidence | visibility |\n"
                       "|---|---|---|---|---|\n| 1 | Zebulon secret take: leaving soon. | take | 0.6 | private |\n"
                       "<!--- gbrain:takes:end -->\nZebulon | is | a *markdown* fan.\n",
     "aliases": []},
    {"slug": "concepts/%s-%(x)s-{0}-format", "title": "Percent Format Protocol", "type": "concept",
     "compiled_truth": "## Heading\n\n$$ dollar quoted $$ and 'quotes' \\\\ backslashes.\n", "aliases": []},
    {"slug": "projects/ünïcödé-😀", "title": "Project Nightjar \u202eReversed", "type": "project",
     "compiled_truth": "Nightjar is `code` and\r\nCRLF and \ttabs.\n", "aliases": ["Nightjar"]},
)
EXTRA_TITLES = ("Quillfeather Dynamics", "Quillfeather", "Zebulon Marchetti", "Zebulon\nMarchetti",
                "Percent Format Protocol", "Project Nightjar \u202eReversed", "Nightjar")


def write_brain(conformance_brain: Path, target: Path) -> Path:
    """The conformance brain plus :data:`EXTRA_PAGES`, as a brain directory."""
    target.mkdir(parents=True, exist_ok=True)
    pages = (conformance_brain / "pages.jsonl").read_text(encoding="utf-8").splitlines()
    aliases = (conformance_brain / "aliases.jsonl").read_text(encoding="utf-8").splitlines()
    next_id = len(pages) + 1
    for offset, extra in enumerate(EXTRA_PAGES):
        page = {"id": next_id + offset, "source_id": "default", "deleted": False,
                "frontmatter": {"type": extra["type"], "aliases": extra["aliases"]}, **extra}
        pages.append(json.dumps(page, ensure_ascii=False))
        for alias in extra["aliases"]:
            aliases.append(json.dumps({"source_id": "default", "alias_norm": normalize_alias(alias),
                                       "slug": extra["slug"]}, ensure_ascii=False))
    (target / "pages.jsonl").write_text("\n".join(pages) + "\n", encoding="utf-8")
    (target / "aliases.jsonl").write_text("\n".join(aliases) + "\n", encoding="utf-8")
    return target


@dataclass(frozen=True, slots=True)
class FuzzRecord:
    kind: str
    key: bytes | None
    value: bytes | None
    codes: frozenset[str]  # allowed dead-letter codes; empty = a good record

    @property
    def good(self) -> bool:
        return not self.codes


_LINES = [text for dialogue in conformance_dialogues() for _, text in dialogue
          if len(text.encode("utf-8")) <= MAX_TEXT_BYTES]
SESSIONS = (
    *(f"fz-{i:03d}" for i in range(150)),
    "sess'; DROP TABLE context_volunteer_events;--",
    "**md** [x](javascript:y) <b>",
    "%s%s%(x)s{}",
    "\u202eevil-session",
    "会话-一",
    "😀-session",
    "s" * 256,
    "Robert'); --",
)
ROLES = ("user", "assistant", "USER", "Assistant", "aSSistant")
SOURCES = (None, None, None, "default", "team", "archive", "'; DELETE FROM pages;--")
CHANNELS = (None, None, "cli", "'; DROP TABLE x;--", "**md**", "%(x)s", "c" * 64)
assert not set(CHANNELS) & set(HOOK_CHANNELS)

text_chars = st.characters(exclude_categories=["Cs"])  # any code point but lone surrogates


@st.composite
def good_text(draw: st.DrawFn) -> str:
    how = draw(st.sampled_from(("line", "line", "line", "mention", "random", "blank", "big")))
    if how == "line":
        return draw(st.sampled_from(_LINES))
    if how == "mention":
        title = draw(st.sampled_from(EXTRA_TITLES))
        return f"{draw(st.sampled_from(INJECTIONS))} then {title} {draw(st.sampled_from(INJECTIONS))}"
    if how == "blank":
        return draw(st.sampled_from(("", "   ", "\n\t ", "\u00a0\u2003")))
    if how == "big":  # just under the limit, multi-byte
        return "é" * (MAX_TEXT_BYTES // 2 - 8) + " Quillfeather Dynamics"[: 8]
    return draw(st.text(text_chars, max_size=200))


@st.composite
def good_object(draw: st.DrawFn) -> dict[str, object]:
    obj: dict[str, object] = {"session_id": draw(st.sampled_from(SESSIONS)), "role": draw(st.sampled_from(ROLES)),
                              "text": draw(good_text())}
    numbering = draw(st.integers(0, 2999))
    if numbering < 1000:  # a third numbered (repeats and gaps included), rarely at the very top
        obj["turn"] = 2_147_483_647 if numbering == 0 else draw(st.integers(1, 80))
    if draw(st.booleans()):
        obj["ts"] = draw(st.one_of(st.integers(0, 4_000_000_000_000), st.just("2026-05-01T12:00:00Z"),
                                   st.just("2026-05-01T14:00:00.123+02:00")))
    source = draw(st.sampled_from(SOURCES))
    if source is not None:
        obj["source_id"] = source
    channel = draw(st.sampled_from(CHANNELS))
    if channel is not None:
        obj["channel"] = channel
    return obj


def _record(kind: str, obj: object, codes: set[str], key: bytes | None = None, *,
            use_key: bool = True) -> FuzzRecord:
    value = orjson.dumps(obj)
    if use_key and key is None and isinstance(obj, dict) and isinstance(obj.get("session_id"), str):
        key = obj["session_id"].encode("utf-8", "surrogatepass")
    return FuzzRecord(kind, key, value, frozenset(codes))


# One defect each: (kind, how to break a good object, allowed codes)
def _defects(draw: st.DrawFn, obj: dict[str, object]) -> FuzzRecord:
    kind = draw(st.sampled_from((
        "missing_field", "wrong_type", "empty_session", "long_session", "control_session", "key_mismatch",
        "unknown_role", "text_too_large", "invalid_turn", "invalid_ts", "bad_source", "bad_channel",
        "missing_key", "tombstone", "invalid_utf8", "lone_surrogate", "truncated_json", "not_an_object",
        "oversize", "garbage", "fake_delivery",
    )))
    sid = str(obj["session_id"])
    key = sid.encode()
    if kind == "missing_field":
        field = draw(st.sampled_from(("session_id", "role", "text")))
        del obj[field]
        return _record(kind, obj, {"missing_field"}, key)
    if kind == "wrong_type":
        field = draw(st.sampled_from(("session_id", "role", "text", "source_id", "channel")))
        obj[field] = draw(st.sampled_from((7, 1.5, True, ["x"], {"a": 1})))
        return _record(kind, obj, {"wrong_type"}, key)
    if kind == "empty_session":
        obj["session_id"] = ""
        return _record(kind, obj, {"empty_field"}, b"")
    if kind == "long_session":
        obj["session_id"] = "L" * draw(st.integers(257, 2000))
        return _record(kind, obj, {"session_id_too_long"})
    if kind == "control_session":
        obj["session_id"] = sid[:20] + draw(st.sampled_from(("\x00", "\x01", "\n", "\x1f", "\x7f"))) + "x"
        return _record(kind, obj, {"control_characters"})
    if kind == "key_mismatch":
        other = draw(st.sampled_from((b"", b"other", sid.upper().encode() + b"!", b"\xff\xfe", sid.encode() + b" ")))
        return _record(kind, obj, {"key_mismatch"}, other)
    if kind == "unknown_role":
        obj["role"] = draw(st.sampled_from(("system", "robot", "", "tool", "users", "USER\x00", "usér")))
        return _record(kind, obj, {"unknown_role"}, key)
    if kind == "text_too_large":
        size = draw(st.integers(MAX_TEXT_BYTES + 1, MAX_TEXT_BYTES + 20_000))
        obj["text"] = draw(st.sampled_from(("a", "é", "😀", " "))) * size
        return _record(kind, obj, {"text_too_large", "oversize"}, key)  # oversize: the record is too big
    if kind == "invalid_turn":
        obj["turn"] = draw(st.sampled_from((0, -1, -2_147_483_648, 2_147_483_648, 2**63 - 1, 1e30, 1.5, "3", True,
                                            [])))
        return _record(kind, obj, {"invalid_turn"}, key)
    if kind == "invalid_ts":
        obj["ts"] = draw(st.sampled_from(("yesterday", "2026-13-01T00:00:00Z", "2026-05-01T12:00:00", -1, True,
                                          [1], 1e300)))
        return _record(kind, obj, {"invalid_ts"}, key)
    if kind in ("bad_source", "bad_channel"):
        field = "source_id" if kind == "bad_source" else "channel"
        limit = 256 if field == "source_id" else 64
        bad, code = draw(st.sampled_from((("", "empty_field"), ("z" * (limit + 1), "field_too_long"),
                                          ("a\x00b", "control_characters"), ("tab\there", "control_characters"))))
        obj[field] = bad
        return _record(kind, obj, {code}, key)
    if kind == "missing_key":
        return FuzzRecord(kind, None, orjson.dumps(obj), frozenset({"missing_key"}))
    if kind == "tombstone":
        return FuzzRecord(kind, key, None, frozenset({"missing_value"}))
    if kind == "invalid_utf8":
        raw = orjson.dumps(obj)
        at = draw(st.integers(0, len(raw)))
        return FuzzRecord(kind, key, raw[:at] + draw(st.sampled_from((b"\xff", b"\xc3", b"\xed\xa0\x80"))) + raw[at:],
                          frozenset({"invalid_utf8"}))
    if kind == "lone_surrogate":
        raw = orjson.dumps({**obj, "text": "SURROGATE"}).replace(b"SURROGATE", b"a\\ud800b")
        return FuzzRecord(kind, key, raw, frozenset({"invalid_json", "invalid_utf8"}))
    if kind == "truncated_json":
        raw = orjson.dumps(obj)
        cut = raw[: draw(st.integers(0, len(raw) - 1))]  # a cut inside a multi-byte character is invalid UTF-8
        return FuzzRecord(kind, key, cut, frozenset({"invalid_json", "invalid_utf8"}))
    if kind == "not_an_object":
        value = draw(st.sampled_from((b"[]", b"[1,2]", b"1", b'"text"', b"null", b"true", b"3.5")))
        return FuzzRecord(kind, key, value, frozenset({"not_an_object"}))
    if kind == "oversize":
        return _record(kind, {**obj, "text": "o" * (MAX_TEXT_BYTES + 70_000)}, {"oversize"}, key)
    if kind == "garbage":  # arbitrary bytes that cannot be a JSON object
        value = draw(st.binary(min_size=0, max_size=300).filter(lambda b: not b.lstrip().startswith(b"{")))
        return FuzzRecord(kind, key, value, frozenset({"invalid_utf8", "invalid_json", "not_an_object"}))
    # fake_delivery: looks like a hook delivery record but is not a valid one
    quoted = orjson.dumps(sid)
    value = b'{"kind":"delivered",' + draw(st.sampled_from((
        b'"session_id":"x"}', b'"session_id":1}', b'"oops',
        b'"session_id":' + quoted + b',"turn":0,"slugs":[],"channel":"claude-code","ts":1}',
        b'"session_id":' + quoted + b',"turn":1,"slugs":[],"channel":"cli","ts":1}')))
    return FuzzRecord(kind, key, value, frozenset({"invalid_delivery", "invalid_json", "key_mismatch"}))


@st.composite
def fuzz_record(draw: st.DrawFn) -> FuzzRecord:
    obj = draw(good_object())
    if draw(st.integers(0, 99)) < 55:
        return _record("good", obj, set())
    return _defects(draw, obj)


def generate(records: int, *, seed: int = 0) -> list[FuzzRecord]:
    """About ``records`` fuzzed records (hypothesis drives the choices; deterministic per seed)."""
    collected: list[FuzzRecord] = []
    per_example = 100

    @settings(max_examples=max(1, records // per_example), deadline=None, database=None, derandomize=seed == 0,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(st.lists(fuzz_record(), min_size=per_example, max_size=per_example))
    def collect(batch: list[FuzzRecord]) -> None:
        collected.extend(batch)

    if seed:
        from hypothesis import seed as hypothesis_seed

        hypothesis_seed(seed)(collect)()
    else:
        collect()
    return collected
