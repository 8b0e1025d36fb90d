"""The printed block: line form, one line per page, the 10,000-character cap and what is dropped."""

from __future__ import annotations

from typing import Any

import orjson

from pipeline.hook.render import BLOCK_HEADING, BLOCK_MARKER, fit, output_length, page_line, payload_for


def page(slug: str, confidence: float, synopsis: str = "A synopsis.", display: str = "Alice Example",
         rationale: str = 'exact title match "Alice Example"; mentioned in the newest turn') -> dict[str, Any]:
    return {"slug": slug, "source_id": "default", "display": display, "confidence": confidence, "arm": "title",
            "rationale": rationale, "synopsis": synopsis}


def test_line_form() -> None:
    assert page_line(page("people/alice-example", 0.8500000000000001, "Alice is an early founder.")) == (
        '- **Alice Example** → `people/alice-example` (0.85, exact title match "Alice Example"; mentioned in '
        "the newest turn) — Alice is an early founder.")
    assert page_line(page("a", 0.9, synopsis="")).endswith("newest turn)")


def test_multi_line_values_cannot_forge_markdown() -> None:
    line = page_line(page("a", 0.8, synopsis="one\n## two", display="Alice\nExample"))
    assert "\n" not in line and "**Alice Example**" in line and "— one ## two" in line


def test_payload_is_the_harness_shape() -> None:
    out = orjson.loads(payload_for([page("a", 0.9), page("b", 0.8)]))
    assert out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    lines = out["hookSpecificOutput"]["additionalContext"].split("\n")
    assert lines[:2] == [BLOCK_MARKER, BLOCK_HEADING]
    assert [line.split("`")[1] for line in lines[2:]] == ["a", "b"]


def test_everything_printed_when_it_fits() -> None:
    pages = [page("a", 0.9), page("b", 0.8)]
    output, printed = fit(pages, 10_000)
    assert printed == pages and output == payload_for(pages) + "\n"


def test_over_the_cap_the_lowest_confidence_goes_first() -> None:
    pages = [page("low", 0.72, "x" * 150), page("high", 0.9, "y" * 150), page("mid", 0.85, "z" * 150)]
    both = output_length(payload_for([pages[1], pages[2]]) + "\n")
    output, printed = fit(pages, both)
    assert [p["slug"] for p in printed] == ["high", "mid"]  # order kept, lowest dropped
    assert output is not None and output_length(output) <= both
    _, printed = fit(pages, both - 1)
    assert [p["slug"] for p in printed] == ["high"]


def test_ties_keep_the_earlier_page() -> None:
    pages = [page("first", 0.85), page("second", 0.85)]
    cap = output_length(payload_for(pages[:1]) + "\n")
    assert [p["slug"] for p in fit(pages, cap)[1]] == ["first"]


def test_nothing_fits_prints_nothing() -> None:
    assert fit([page("a", 0.9)], 50) == (None, [])
    assert fit([], 10_000) == (None, [])


def test_length_counts_utf16_units_like_the_harness() -> None:
    assert output_length("a😀é") == 4
    wide = [page("a", 0.9, synopsis="😀" * 100)]
    exact = output_length(payload_for(wide) + "\n")
    assert exact > len(payload_for(wide) + "\n")
    assert fit(wide, exact)[1] == wide and fit(wide, exact - 1)[1] == []


def test_protocol_mirrors_the_record_limits() -> None:
    from pipeline.hook import protocol
    from topics import records

    assert (protocol.MAX_SESSION_ID_CHARS, protocol.MAX_TURN_NUMBER) == (records.MAX_SESSION_ID_CHARS,
                                                                        records.MAX_TURN_NUMBER)


def test_raw_http_responses_are_parsed() -> None:
    import pytest

    from pipeline.hook.http import WorkerUnavailable, parse_response, split_url

    assert split_url("http://127.0.0.1:6066/") == ("127.0.0.1", 6066, "")
    assert split_url("http://[::1]:7/base/") == ("::1", 7, "/base")
    assert split_url("localhost") == ("localhost", 80, "")
    assert split_url("https://host:1") == ("host", 1, "")  # TLS for workers on other hosts
    assert split_url("https://host") == ("host", 443, "")
    with pytest.raises(WorkerUnavailable, match="bad_url"):
        split_url("ftp://host:1")
    assert parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk") == (200, b"{}")
    assert parse_response(b"HTTP/1.1 400 Bad\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n") == (400, b"{}")
    with pytest.raises(WorkerUnavailable, match="truncated"):
        parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}")


def test_the_fast_entry_parses_like_the_click_command() -> None:
    from pipeline.hook.config import OPTIONS
    from pipeline.hook.entry import parse_user_prompt

    assert parse_user_prompt([]) == ("claude-code", {})
    assert parse_user_prompt(["--harness", "codex", "--url=http://h:1", "--deadline-ms", "300"]) == (
        "codex", {"VOLUNTEER_HOOK_URL": "http://h:1", "VOLUNTEER_HOOK_DEADLINE_MS": "300"})
    assert parse_user_prompt(["--enabled", "0"]) == ("claude-code", {"VOLUNTEER_HOOKS": "0"})
    for handed_to_click in (["-h"], ["--help"], ["--harness", "nope"], ["--url"], ["--unknown", "x"], ["x"]):
        assert parse_user_prompt(handed_to_click) is None
    # Every option of the click command is one the fast path knows, and vice versa.
    from pipeline.cli.hook_cmd import user_prompt

    click_flags = {opt for param in user_prompt.params for opt in param.opts if opt.startswith("--")}
    assert click_flags == {flag for flag, _, _ in OPTIONS} | {"--harness"}
