"""``volunteer replay --sweep/--score/--plot``: JSON shape, the table, the plot file, flag errors."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions
from pipeline.tuning.grid import Setting
from pipeline.tuning.parallel import run_sweep
from tests.unit.tuning.conftest import BRAIN_DIR, LABELLED, TRANSCRIPT

SWEEP = ["--sweep", "min_confidence=0.6,0.7,0.8"]
KNOBS = ("min_confidence", "max_pages", "window_turns")


def run(args: list[str], stdin: bytes = b"", env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner(mix_stderr=False).invoke(main, ["replay", *args], input=stdin, env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def rows_of(out: str) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in out.splitlines()]


def test_json_is_one_object_per_setting_with_the_figures_of_the_sweep(brain: BrainIndex,
                                                                    labelled_lines: list[bytes]) -> None:
    code, out, err = run([str(LABELLED), "--brain", str(BRAIN_DIR), *SWEEP, "--json", "--jobs", "2"])
    assert code == 0, err
    rows = rows_of(out)
    assert [r["min_confidence"] for r in rows] == [0.6, 0.7, 0.8]
    grid = [Setting(c, 3, 4) for c in (0.6, 0.7, 0.8)]
    direct = run_sweep(labelled_lines, brain, grid, DecisionOptions(), jobs=1)
    for row, tally in zip(rows, direct.tallies, strict=True):
        assert (row["max_pages"], row["window_turns"]) == (3, 4)
        assert row["turns"] == tally.turns == 240
        assert row["volunteered"] == tally.volunteered
        assert row["precision"] == tally.precision and row["recall"] == tally.recall
        assert isinstance(row["precision"], float) and isinstance(row["recall"], float)
        arms = row["arms"]
        assert isinstance(arms, dict)
        assert set(arms) == {"alias", "title", "title-surname", "cjk-title", "slug-suffix"}
        assert sum(a["volunteered"] for a in arms.values()) == row["volunteered"]
        assert row["silent_turns"] == len(direct.silences)
    precisions = [r["precision"] for r in rows]
    recalls = [r["recall"] for r in rows]
    assert precisions[0] < precisions[2] and recalls[0] > recalls[2]  # the sample shows the trade-off


def test_one_and_two_processes_print_the_same_json() -> None:
    args = [str(LABELLED), "--brain", str(BRAIN_DIR), *SWEEP, "--sweep", "window_turns=1,4", "--json"]
    assert run([*args, "--jobs", "1"])[1] == run([*args, "--jobs", "2"])[1]


def test_without_labels_precision_and_recall_are_null() -> None:
    code, out, _ = run([str(TRANSCRIPT), "--brain", str(BRAIN_DIR), *SWEEP, "--json"])
    assert code == 0
    rows = rows_of(out)
    assert len(rows) == 3
    assert all(r["precision"] is None and r["recall"] is None and r["labelled_turns"] == 0 for r in rows)
    assert rows[0]["volunteered"] > rows[2]["volunteered"] > 0


def test_score_reports_the_current_settings_from_flags_and_environment() -> None:
    code, out, _ = run([str(LABELLED), "--brain", str(BRAIN_DIR), "--score", "--json", "--max-pages", "2"],
                       env={"VOLUNTEER_MIN_CONFIDENCE": "0.75", "VOLUNTEER_WINDOW_TURNS": "6"})
    assert code == 0
    (row,) = rows_of(out)
    assert {k: row[k] for k in KNOBS} == {"min_confidence": 0.75, "max_pages": 2, "window_turns": 6}


def test_the_table_marks_the_best_setting_and_lists_silences(tmp_path: Path) -> None:
    extra = orjson.dumps({"session_id": "late", "role": "user", "text": "and who is she?",
                          "expected_slugs": ["people/alice-example"]})
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(LABELLED.read_bytes() + extra + b"\n")
    code, out, _ = run([str(transcript), "--brain", str(BRAIN_DIR), *SWEEP])
    assert code == 0
    assert "swept 3 setting(s) over 241 turn(s)" in out
    for header in ("min_conf", "precision", "recall", "F1", "per arm: pages · precision · recall", "title-surname"):
        assert header in out
    best = re.search(r"★ best F1 ([0-9.]+): min_confidence=([0-9.]+) max_pages=3 window_turns=4", out)
    assert best is not None
    rows = rows_of(run([str(transcript), "--brain", str(BRAIN_DIR), *SWEEP, "--json"])[1])
    top = max(rows, key=lambda r: (r["f1"], r["precision"]))
    assert float(best.group(2)) == top["min_confidence"]
    assert best.group(1) == f"{top['f1']:.3f}"
    assert "labelled turn(s) in" in out and "late (turn 1)" in out


def test_plot_html_holds_every_point_and_fetches_nothing(tmp_path: Path) -> None:
    plot = tmp_path / "sweep.html"
    args = [str(LABELLED), "--brain", str(BRAIN_DIR), *SWEEP, "--sweep", "max_pages=1,3"]
    code, out, err = run([*args, "--json", "--plot", str(plot)])
    assert code == 0, err
    assert f"plot written to {plot}" in err
    html = plot.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html
    assert "<script" not in html and not re.search(r"(src|href)=", html)
    assert set(re.findall(r"https?://[^\"' ]+", html)) == {"http://www.w3.org/2000/svg"}
    for row in rows_of(out):
        for metric in ("precision", "recall"):
            point = (f'data-min-confidence="{row["min_confidence"]!r}" data-max-pages="{row["max_pages"]}" '
                     f'data-window-turns="{row["window_turns"]}" data-{metric}="{row[metric]!r}"')
            assert html.count(point) == 1, point
    assert html.count('class="point"') == 2 * 6
    assert html.count("max_pages=1 window_turns=4") >= 1 and html.count("max_pages=3 window_turns=4") >= 1


def test_plot_svg_is_a_bare_image(tmp_path: Path) -> None:
    plot = tmp_path / "sweep.svg"
    code, _, _ = run([str(LABELLED), "--brain", str(BRAIN_DIR), *SWEEP, "--plot", str(plot)])
    assert code == 0
    text = plot.read_text(encoding="utf-8")
    assert text.startswith('<?xml version="1.0"') and text.rstrip().endswith("</svg>")
    assert text.count('class="point"') == 6


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--plot", "x.html"], "--plot only apply to a sweep: add --sweep NAME=VALUES or --score"),
        (["--jobs", "2"], "--jobs only apply to a sweep"),
        (["--sweep", "min_confidence=0.7", "--plot", "x.png"], "--plot x.png: write an .html page or an .svg image"),
        (["--sweep", "min_confidence=2"], "--sweep min_confidence=2: 2 is outside 0..1"),
        (["--rate", "100"], "--rate only apply with --to-topic"),
        (["--channel", "x", "--broker", "kafka://h:1"], "--channel, --broker only apply with --to-topic"),
        (["--to-topic", "--sweep", "max_pages=1", "--min-confidence", "0.6"],
         "--to-topic only publishes the records (the worker's own settings decide what it volunteers); "
         "drop --sweep, --min-confidence"),
        (["--to-topic", "--rate", "fast"], "--rate 'fast': use 'original', a speed-up such as '10x'"),
        (["--to-topic", "--channel", "a\tb"], "--channel 'a\\tb': field 'channel' contains NUL or control characters"),
    ],
)
def test_flags_that_would_be_ignored_or_are_bad_stop_with_usage_errors(args: list[str], message: str) -> None:
    code, out, err = run([str(LABELLED), "--brain", str(BRAIN_DIR), *args])
    assert code == 2
    assert message in " ".join(err.split())
    assert out == ""


def test_bad_lines_and_labels_are_reported_with_line_numbers() -> None:
    good = LABELLED.read_bytes().split(b"\n")[:3]
    stdin = b"\n".join([good[0], b"{nope", b'{"session_id":"q","role":"user","text":"hi","expected_slugs":[1]}',
                        good[1], good[2]]) + b"\n"
    code, out, err = run(["-", "--brain", str(BRAIN_DIR), "--score", "--json"], stdin)
    assert code == 0
    first, second = err.splitlines()
    assert first.startswith("line 2: invalid_json: value is not valid JSON: ")
    assert second == ("line 3: bad_label: field 'expected_slugs' item 0 must be a non-empty slug string, got int "
                      "(the turn replays unlabelled)")
    (row,) = rows_of(out)
    assert row["turns"] == 4 and row["labelled_turns"] == 3


def test_input_without_a_usable_record_fails() -> None:
    code, _, err = run(["-", "--brain", str(BRAIN_DIR), "--score"], b"{x\n[1]\n")
    assert code == 1
    assert "none of the 2 line(s) was a usable Turn record" in err
