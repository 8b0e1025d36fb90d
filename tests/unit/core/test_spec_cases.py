"""The reference's own acceptance cases (reference-behaviour.md §15.2-15.4) that belong to the decision core.

Core, watch, window parsing, single-turn and window extraction, gate (including the post-snapshot
prefix cases G07/G08), op contract and formatting. Stats, purge and event-logging cases belong to
the sink and are tested there. Expected confidences in the spec are rounded to 6 decimals.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.core.brain import BrainIndex
from pipeline.core.extract import extract_candidates
from pipeline.core.gate import candidates_by_norm, gate
from pipeline.core.op import InvalidParams, volunteer_context
from pipeline.core.pages import AliasRow, Page
from pipeline.core.render import format_page, format_result
from pipeline.core.session import DecisionOptions, run_lines
from pipeline.core.types import Pointer
from pipeline.core.window import extract_window, parse_window

CASES_FILE = Path(__file__).resolve().parents[2] / "fixtures" / "spec" / "cases.jsonl"
CASES = [orjson.loads(line) for line in CASES_FILE.read_bytes().splitlines() if line.strip()]


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [c for c in CASES if c["kind"] == kind]


def case_id(case: dict[str, Any]) -> str:
    return str(case.get("id") or case.get("text") or case.get("turns"))[:60]


def raw(value: Any) -> Any:
    return math.nan if value == "NaN" else value


def rounded(pages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**p, "confidence": round(p["confidence"], 6)} for p in pages]


def brain_of(case: dict[str, Any]) -> BrainIndex:
    pages = [
        Page(
            id=i,
            slug=p["slug"],
            title=p["title"],
            source_id=p.get("source_id", "default"),
            type=p.get("type", "person"),
            compiled_truth=p.get("compiled_truth", ""),
            frontmatter=p.get("frontmatter", {}),
            deleted=p.get("deleted", False),
        )
        for i, p in enumerate(case.get("pages", []), start=1)
    ]
    aliases = [AliasRow(a.get("source_id", "default"), a["alias_norm"], a["slug"]) for a in case.get("aliases", [])]
    return BrainIndex.build(pages, aliases)


def run_volunteer(case: dict[str, Any], *, collapse_display: bool = False) -> dict[str, Any]:
    opts = case["opts"]
    result = volunteer_context(
        case["window"],
        brain_of(case),
        source_ids=opts.get("source_ids", ["default"]),
        prior_context=opts.get("prior_context"),
        max_pages=raw(opts.get("max_pages")),
        min_confidence=raw(opts.get("min_confidence")),
        lexical_arms=opts.get("lexical_arms", True),
        exclude_slugs=frozenset(opts.get("exclude_slugs", ())),
        collapse_display=collapse_display,
    )
    return {"window_turns": result["window_turns"], "pages": rounded(result["pages"])}


@pytest.mark.parametrize("case", of_kind("volunteer"), ids=case_id)
def test_volunteer_case(case: dict[str, Any]) -> None:
    """The snapshot (HEAD) expectation; v1-only expectations do not apply to this port."""
    expected = case.get("expect_head", case.get("expect"))
    assert run_volunteer(case) == {"window_turns": expected["window_turns"], "pages": rounded(expected["pages"])}


def test_post_snapshot_display_collapse_x03() -> None:
    """X03's note: the post-snapshot gate collapses the newline in display, rationale included."""
    case = next(c for c in of_kind("volunteer") if c["id"].startswith("X03"))
    page = run_volunteer(case, collapse_display=True)["pages"][0]
    assert page["display"] == "Alice Example"
    assert page["rationale"] == 'slug match "Alice Example"; mentioned in the newest turn'


def watch_lines(case: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    for line in case["lines"]:
        if line.startswith("…70 filler lines"):
            lines.extend(f"user: filler line {i}" for i in range(1, 71))
        else:
            lines.append(line)
    return lines


def run_watch(case: dict[str, Any]) -> list[str]:
    flags = case["flags"]
    options = DecisionOptions(
        window_turns=flags.get("window_turns", 4),
        max_pages=raw(flags.get("max_pages")),
        min_confidence=raw(flags.get("min_confidence")),
    )
    _, emitted = run_lines(watch_lines(case), brain_of(case), options=options)
    if flags.get("json"):
        return [orjson.dumps({"turn": turn, **page.to_dict()}).decode() for turn, page in emitted]
    return [format_page(page) for _, page in emitted]


WATCH = [c for c in of_kind("watch") if "inject" not in c]  # fault injection into SQL has no analogue here


@pytest.mark.parametrize("case", WATCH, ids=case_id)
def test_watch_case(case: dict[str, Any]) -> None:
    out = run_watch(case)
    expect = case["expect"]
    if "stdout_lines" in expect:
        assert out == expect["stdout_lines"]
    else:
        assert len(out) == expect["count"]
        assert orjson.loads(out[0])["slug"] == expect["slug"]


@pytest.mark.parametrize("case", of_kind("parse_window"), ids=case_id)
def test_parse_window_case(case: dict[str, Any]) -> None:
    assert [{"role": r, "text": t} for r, t in parse_window(case["text"])] == case["expect"]


@pytest.mark.parametrize("case", of_kind("extract_turn"), ids=case_id)
def test_extract_turn_case(case: dict[str, Any]) -> None:
    cands = extract_candidates(case["text"])
    strong = [{"display": d, "query": q} for d, q, _, weak in cands if not weak]
    assert strong == case.get("expect_head_strong", case["expect_v1"])
    assert [q for _, q, _, weak in cands if weak] == case["head_weak_queries"]


@pytest.mark.parametrize("case", of_kind("extract_window"), ids=case_id)
def test_extract_window_case(case: dict[str, Any]) -> None:
    merged = extract_window([(t["role"], t["text"]) for t in case["turns"]])
    assert [c.to_dict() for c in merged if not c.weak] == case["expect_head_strong"]
    assert [c.query for c in merged if c.weak] == case["head_weak_queries"]


def gate_case(case: dict[str, Any], *, prefixes: bool = True) -> list[dict[str, Any]]:
    opts = case["opts"]
    pointers = [Pointer(b["display"], b["slug"], b["source_id"], b["synopsis"], b["arm"], b["confidence"]) for b in case["block"]]
    window = case["cands_window"]
    by_norm = candidates_by_norm(extract_window([(t["role"], t["text"]) for t in window])) if window else {}
    pages = gate(
        pointers,
        by_norm,
        window_size=opts["window_size"],
        max_pages=raw(opts.get("max_pages")),
        min_confidence=raw(opts.get("min_confidence")),
        exclude_slugs=frozenset(opts.get("exclude_slugs", ())),
        exclude_slug_prefixes=opts.get("exclude_slug_prefixes", ()) if prefixes else (),
    )
    return [p.to_dict() for p in pages]


@pytest.mark.parametrize("case", of_kind("gate"), ids=case_id)
def test_gate_case(case: dict[str, Any]) -> None:
    out = gate_case(case)
    if "expect" in case:
        assert rounded(out) == rounded(case["expect"])
    else:
        assert [p["slug"] for p in out] == case["expect_slugs"]
    if "expect_slugs_without_prefix_filter" in case:
        assert [p["slug"] for p in gate_case(case, prefixes=False)] == case["expect_slugs_without_prefix_filter"]


def test_gating_a_gated_set_is_a_no_op() -> None:
    """G04 in general: feeding the gate's output back in gives the same pages."""
    case = next(c for c in of_kind("gate") if c["id"].startswith("G02"))
    once = gate_case(case)
    twice = gate_case({**case, "block": [{**p} for p in once]})
    assert twice == once


CORE_OPS = [c for c in of_kind("op") if c["id"][:3] in {"O01", "O02", "O04", "O05", "O08", "O09", "O10"}]


@pytest.mark.parametrize("case", CORE_OPS, ids=case_id)
def test_op_case(case: dict[str, Any]) -> None:
    params = case["params"]
    scope = case.get("ctx", {}).get("allowed_sources") or ["default"]
    brain = brain_of(case)
    if "expect_error" in case:
        with pytest.raises(InvalidParams) as info:
            volunteer_context(params.get("window"), brain, source_ids=scope)
        assert {"code": info.value.code, "message": info.value.message} == case["expect_error"]
        return
    result = volunteer_context(params["window"], brain, source_ids=scope)
    if "expect_slugs" in case:
        assert [p["slug"] for p in result["pages"]] == case["expect_slugs"]
    else:
        assert {**result, "pages": rounded(result["pages"])} == {**case["expect"], "pages": rounded(case["expect"]["pages"])}


@pytest.mark.parametrize("case", of_kind("format"), ids=case_id)
def test_format_case(case: dict[str, Any]) -> None:
    assert format_result(case["result"]) == case["expect_text"]
