"""``volunteer replay``: Turn records through the per-session step, with reports and errors per line."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
from click.testing import CliRunner

from pipeline.braindir import load_brain_dir
from pipeline.cli import main
from pipeline.cli.replay_cmd import _with_progress
from pipeline.core.session import DecisionOptions, SessionState, step
from pipeline.replay import replay_lines
from topics.records import decode_turn

SAMPLES = Path(__file__).resolve().parents[3] / "pipeline" / "samples"
BRAIN = str(SAMPLES / "brain")
TRANSCRIPT = SAMPLES / "transcript.jsonl"


def run(args: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    result = CliRunner(mix_stderr=False).invoke(main, ["replay", *args], input=stdin, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def expected_lines(options: DecisionOptions) -> list[dict[str, object]]:
    """What the worker's step produces for the sample transcript, computed directly."""
    brain = load_brain_dir(BRAIN)
    states: dict[str, SessionState] = {}
    out: list[dict[str, object]] = []
    for raw in TRANSCRIPT.read_bytes().splitlines():
        turn = decode_turn(raw)
        assert turn is not None
        state = states.setdefault(turn.session_id, SessionState())
        res = step(state, turn.role, turn.text, brain, source_id=turn.source_id or "default", options=options, turn_no=turn.turn)
        out.extend({"session_id": turn.session_id, "turn": res.turn, **p.to_dict()} for p in res.pages)
    return out


def test_json_lines_are_the_step_results() -> None:
    code, out, err = run([str(TRANSCRIPT), "--brain", BRAIN, "--json"])
    assert code == 0, err
    got = [orjson.loads(line) for line in out.splitlines()]
    assert got == expected_lines(DecisionOptions())
    assert {p["arm"] for p in got} >= {"alias", "title", "title-surname", "cjk-title"}
    assert list(got[0]) == ["session_id", "turn", "slug", "source_id", "display", "confidence", "arm", "rationale", "synopsis"]


def test_options_reach_the_core() -> None:
    code, out, _ = run([str(TRANSCRIPT), "--brain", BRAIN, "--json", "--window-turns", "1", "--min-confidence", "0.6", "--max-pages", "1"])
    assert code == 0
    got = [orjson.loads(line) for line in out.splitlines()]
    assert got == expected_lines(DecisionOptions(window_turns=1.0, min_confidence=0.6, max_pages=1.0))
    assert got != expected_lines(DecisionOptions())


def test_readable_report_with_summary() -> None:
    code, out, _ = run([str(TRANSCRIPT), "--brain", BRAIN])
    assert code == 0
    pages = expected_lines(DecisionOptions())
    assert "replayed 12 turn(s) in 3 session(s)" in out
    assert f"volunteered {len(pages)} page(s):" in out
    assert "[investor-update turn 1] Ronan Galewright → people/ronan-galewright (0.77, title-surname)" in out
    title_count = sum(1 for p in pages if p["arm"] == "title")
    assert f"  title          {title_count}\n" in out


def test_bad_lines_are_reported_and_good_lines_still_processed() -> None:
    good = TRANSCRIPT.read_bytes().splitlines()
    stdin = b"\n".join([good[0], b"{not json", b'{"session_id": "s", "role": "robot", "text": "x"}', good[1], b"\xff\xfe", b'{"session_id": "s", "role": "user", "text": 5}']) + b"\n"
    code, out, err = run(["-", "--brain", BRAIN, "--json"], stdin)
    assert code == 0
    assert len(out.splitlines()) == 4  # turn 1: the board meeting; turn 2: three pages
    err_lines = err.strip().splitlines()
    assert [line.split(":")[0] for line in err_lines] == ["line 2", "line 3", "line 5", "line 6"]
    assert "invalid_json" in err_lines[0] and "unknown_role" in err_lines[1]
    assert "invalid_utf8" in err_lines[2] and "wrong_type" in err_lines[3]


def test_nothing_usable_exits_1() -> None:
    code, _, err = run(["-", "--brain", BRAIN], b"{}\nnope\n")
    assert code == 1
    assert "none of the 2 line(s)" in err


def test_empty_input_is_fine() -> None:
    code, out, _ = run(["-", "--brain", BRAIN], b"")
    assert code == 0
    assert "replayed 0 turn(s) in 0 session(s)" in out


def test_duplicates_ignored_and_record_source_wins() -> None:
    lines = [
        {"session_id": "a", "role": "user", "text": "ping Jordan Lee", "turn": 1, "source_id": "default"},
        {"session_id": "a", "role": "user", "text": "ping Jordan Lee", "turn": 1, "source_id": "default"},
        {"session_id": "b", "role": "user", "text": "ping Jordan Lee", "source_id": "default"},
        {"session_id": "c", "role": "user", "text": "ping Jordan Lee"},
        {"session_id": "d", "role": "user", "text": "   "},
    ]
    stdin = b"\n".join(orjson.dumps(line) for line in lines)
    code, out, _ = run(["-", "--brain", BRAIN, "--json", "--source", "elsewhere"], stdin)
    assert code == 0
    assert [(p["session_id"], p["turn"]) for p in map(orjson.loads, out.splitlines())] == [("a", 1), ("b", 1)]
    summary = replay_lines(stdin.splitlines(), load_brain_dir(BRAIN), options=DecisionOptions(), default_source="elsewhere")
    assert (summary.turns, summary.duplicates, summary.blank, summary.sessions) == (3, 1, 1, 3)


def test_an_unnumbered_turn_after_the_highest_turn_number_is_a_bad_line() -> None:
    """Like the worker, which dead-letters it (``turn_overflow``): its number would not fit INTEGER."""
    lines = [orjson.dumps({"session_id": "a", "role": "user", "text": "ping Jordan Lee", "turn": 2_147_483_647}),
             orjson.dumps({"session_id": "a", "role": "user", "text": "ping Jordan Lee again"})]
    errors: list[tuple[int, str]] = []
    summary = replay_lines(lines, load_brain_dir(BRAIN), options=DecisionOptions(),
                           on_error=lambda n, exc: errors.append((n, exc.code)))
    assert (summary.turns, summary.bad) == (1, 1)
    assert errors == [(2, "turn_overflow")]


def test_progress_wrapper_passes_every_line_through() -> None:
    data = b"".join(b"line %d\n" % i for i in range(70_000))
    assert list(_with_progress(io.BytesIO(data), True)) == data.splitlines(keepends=True)


def test_help_explains_the_record_format() -> None:
    code, out, _ = run(["--help"])
    assert code == 0
    assert '"session_id", "role", "text"' in out and "Examples:" in out
