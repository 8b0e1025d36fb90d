"""``volunteer context``: the op on the command line, single window and --batch."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from pipeline.braindir import load_brain_dir
from pipeline.cli import main
from pipeline.core.op import volunteer_context
from pipeline.core.render import format_result

SAMPLES = Path(__file__).resolve().parents[3] / "pipeline" / "samples"
BRAIN = str(SAMPLES / "brain")
WINDOW = (SAMPLES / "window.txt").read_text(encoding="utf-8")


def run(args: list[str], stdin: bytes | str = b"") -> tuple[int, str, str]:
    runner = CliRunner(mix_stderr=False)
    result = runner.invoke(main, ["context", *args], input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_human_output_is_the_reference_rendering() -> None:
    code, out, err = run(["--brain", BRAIN], WINDOW)
    assert code == 0, err
    expected = volunteer_context(WINDOW, load_brain_dir(BRAIN))
    assert expected["count"] == 3
    assert out == format_result(expected)
    assert "(0.77, title-surname)" in out


def test_json_output_matches_the_core_exactly() -> None:
    code, out, _ = run(["--brain", BRAIN, "--json"], WINDOW)
    assert code == 0
    assert orjson.loads(out) == volunteer_context(WINDOW, load_brain_dir(BRAIN))
    assert out.index('"pages"') < out.index('"count"') < out.index('"window_turns"')


def test_window_flag_and_env_brain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLUNTEER_BRAIN", BRAIN)
    code, out, _ = run(["--window", "user: ping Jordan Lee", "--json"])
    assert code == 0
    assert [p["slug"] for p in orjson.loads(out)["pages"]] == ["people/jordan-lee"]


def test_nothing_volunteered_message() -> None:
    code, out, _ = run(["--brain", BRAIN], "user: ok thanks, sounds good\n")
    assert code == 0
    assert out == "Nothing volunteered (no entity cleared the confidence gate).\n"


@pytest.mark.parametrize("stdin", ["", "   \n\t\n"])
def test_blank_window_is_a_one_line_error(stdin: str) -> None:
    code, out, err = run(["--brain", BRAIN], stdin)
    assert code == 1 and out == ""
    assert err.strip().count("\n") == 0
    assert "window is required unless stats: true" in err


def test_window_over_five_million_bytes_exits_1() -> None:
    code, _, err = run(["--brain", BRAIN], b"user: " + b"a" * 5_000_000)
    assert code == 1
    assert "over 5,000,000 bytes" in err


def test_exactly_five_million_bytes_is_accepted() -> None:
    window = b"user: Jordan Lee " + b"x" * (5_000_000 - 17)
    assert len(window) == 5_000_000
    code, out, _ = run(["--brain", BRAIN, "--json"], window)
    assert code == 0
    assert orjson.loads(out)["window_turns"] == 1


def test_invalid_utf8_names_the_line() -> None:
    code, _, err = run(["--brain", BRAIN], b"user: hi\nuser: caf\xe9\n")
    assert code == 1
    assert "line 2" in err and "UTF-8" in err


def test_numbers_are_read_like_javascript_and_clamped() -> None:
    window = "user: Did Galewright reply? ask Alice Example and Jordan Lee about Kiteline in Lisbon"
    base = orjson.loads(run(["--brain", BRAIN, "--json"], window)[1])
    assert base["count"] == 3
    for flag, value, count in [("--max-pages", "0.5", 3), ("--max-pages", "2.9", 2), ("--max-pages", "50", 5)]:
        result = orjson.loads(run(["--brain", BRAIN, "--json", flag, value], window)[1])
        assert result["count"] == count, (flag, value)
    # a non-number gate acts as NaN -> the default 0.7; 0.8 drops the 0.77 surname hit
    assert orjson.loads(run(["--brain", BRAIN, "--json", "--min-confidence", "abc"], window)[1]) == base
    strict = orjson.loads(run(["--brain", BRAIN, "--json", "--min-confidence", "0.8", "--max-pages", "5"], window)[1])
    assert all(p["confidence"] >= 0.8 for p in strict["pages"]) and strict["count"] >= 1


def test_sources_prior_context_prefixes_and_kill_switch() -> None:
    window = "user: Did Galewright reply? ask Alice Example"
    def slugs(*args: str) -> list[str]:
        return [p["slug"] for p in orjson.loads(run(["--brain", BRAIN, "--json", *args], window)[1])["pages"]]

    assert slugs() == ["people/alice-example", "people/ronan-galewright"]
    assert slugs("--no-lexical-arms") == ["people/alice-example"]
    assert slugs("--exclude-slug-prefix", "people/alice") == ["people/ronan-galewright"]
    assert slugs("--prior-context", "see PEOPLE/ALICE-EXAMPLE") == ["people/ronan-galewright"]
    assert slugs("--source", "elsewhere") == []


def test_missing_brain_is_a_usage_error() -> None:
    code, _, err = run([], "user: hi")
    assert code == 2
    assert "--brain DIR" in err


def test_bad_brain_directory_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "pages.jsonl").write_text('{"slug": "a", "title": "A"}\n{"slug": "b"}\n', encoding="utf-8")
    code, _, err = run(["--brain", str(tmp_path)], "user: hi")
    assert code == 1
    assert "pages.jsonl:2" in err and "title" in err


def test_stats_needs_a_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VOLUNTEER_DATABASE_URL", raising=False)
    code, _, err = run(["--stats"])
    assert code == 2
    assert "--database-url" in err


def test_batch_one_result_per_request_in_order() -> None:
    lines = [
        orjson.dumps({"window": "user: ping Jordan Lee"}),
        b"not json",
        orjson.dumps({"window": "   "}),
        b"",
        orjson.dumps({"window": "user: ping Jordan Lee", "max_pages": "x", "source_ids": ["nowhere"]}),
        orjson.dumps([1, 2]),
        orjson.dumps({"window": "assistant: Alice Example\nuser: hm", "min_confidence": 0.81}),
        orjson.dumps({"window": "user: hi", "source_ids": "default"}),
    ]
    code, out, err = run(["--brain", BRAIN, "--batch"], b"\n".join(lines) + b"\n")
    assert code == 0
    results = [orjson.loads(line) for line in out.splitlines()]
    assert len(results) == 7
    assert [p["slug"] for p in results[0]["pages"]] == ["people/jordan-lee"]
    assert results[1]["error"] == "invalid_request"
    assert results[2] == {"error": "invalid_params", "message": "window is required unless stats: true"}
    assert results[3] == {"pages": [], "count": 0, "window_turns": 1}
    assert results[4]["error"] == "invalid_request"
    assert results[5] == {"pages": [], "count": 0, "window_turns": 2}
    assert results[6]["error"] == "invalid_params"
    for lineno in (2, 3, 5, 6, 8):
        assert f"line {lineno}:" in err
    assert "line 1:" not in err and "line 7:" not in err


def test_batch_with_no_usable_line_exits_1() -> None:
    code, out, err = run(["--brain", BRAIN, "--batch"], b"{bad\n[]\n")
    assert code == 1
    assert len(out.splitlines()) == 2
    assert "none of the 2 request line(s)" in err


def test_help_shows_examples() -> None:
    code, out, _ = run(["--help"])
    assert code == 0
    assert "Examples:" in out and "--batch" in out and "volunteer context --brain" in out
