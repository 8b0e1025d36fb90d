"""Sweeps over several processes: stable partitioning by session, and exactly the one-process result."""

from __future__ import annotations

import subprocess
import sys
from typing import cast

import orjson
import pytest

from pipeline.core.brain import BrainIndex
from pipeline.core.session import DecisionOptions
from pipeline.tuning.grid import Setting, build_grid, parse_sweeps
from pipeline.tuning.parallel import WorkerFailed, partition_of, run_sweep, split_lines
from pipeline.tuning.report import setting_rows

GRID = build_grid(Setting(0.7, 3, 4), parse_sweeps(["min_confidence=0.6:0.8:0.1", "window_turns=1,4", "max_pages=1,3"]))


def with_noise(lines: list[bytes]) -> list[bytes]:
    """The sample plus a bad line, a blank line, a bad label and a silence, spread over the file."""
    extra = [
        b"{not json",
        b"",
        orjson.dumps({"session_id": "zz", "role": "user", "text": "and who is she?",
                      "expected_slugs": ["people/alice-example"]}),
        orjson.dumps({"session_id": "yy", "role": "user", "text": "Alice Example", "expected_slugs": 5}),
    ]
    out = list(lines)
    for i, line in enumerate(extra):
        out.insert(i * 50 + 7, line)
    return out


def test_two_and_three_processes_give_exactly_the_one_process_figures(brain: BrainIndex,
                                                                       labelled_lines: list[bytes]) -> None:
    lines = with_noise(labelled_lines)
    one = run_sweep(lines, brain, GRID, DecisionOptions(), jobs=1)
    assert one.silences and one.problems and one.bad == 1  # the noise is really there
    for jobs in (2, 3):
        many = run_sweep(lines, brain, GRID, DecisionOptions(), jobs=jobs)
        assert setting_rows(many, GRID) == setting_rows(one, GRID)
        assert many.problems == one.problems
        assert many.silences == one.silences
        assert (many.lines, many.bad, many.blank, many.duplicates, many.sessions) == (
            one.lines, one.bad, one.blank, one.duplicates, one.sessions)


def test_progress_from_all_processes_adds_up(brain: BrainIndex, labelled_lines: list[bytes]) -> None:
    reported: list[int] = []
    totals: list[int] = []
    run_sweep(labelled_lines, brain, GRID, DecisionOptions(), jobs=2, progress=reported.append, on_split=totals.append)
    assert totals == [len(labelled_lines)]
    assert sum(reported) == len(labelled_lines) * len(GRID)


def test_every_session_lands_in_one_partition_with_its_line_numbers(labelled_lines: list[bytes]) -> None:
    lines = with_noise(labelled_lines)
    parts = split_lines(lines, 3)
    assert sum(len(p) for p in parts) == sum(1 for line in lines if line.strip())
    owner: dict[str, int] = {}
    for index, part in enumerate(parts):
        for lineno, raw in part:
            assert lines[lineno - 1] == raw
            try:
                session = orjson.loads(raw)["session_id"]
            except orjson.JSONDecodeError:
                assert index == 0  # unreadable lines go to the first partition
                continue
            assert owner.setdefault(session, index) == index
    assert len(set(owner.values())) == 3


def test_the_partition_of_a_session_does_not_depend_on_the_hash_seed() -> None:
    code = "from pipeline.tuning.parallel import partition_of; print([partition_of(f's{i}', 7) for i in range(50)])"
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": seed, "PATH": ""}).stdout
        for seed in ("1", "2")
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == str([partition_of(f"s{i}", 7) for i in range(50)])


def test_a_crashing_process_is_an_error_with_its_traceback(labelled_lines: list[bytes]) -> None:
    # No brain: the pure core fails on an attribute, the compiled one on its argument's type.
    with pytest.raises(WorkerFailed, match=r"(?s)Traceback.*(AttributeError|TypeError)"):
        run_sweep(labelled_lines, cast(BrainIndex, None), GRID[:1], DecisionOptions(), jobs=2)
