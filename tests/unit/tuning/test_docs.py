"""docs/tuning.md shows what the command prints: its sweep table and its plot are checked here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import main

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "tuning.md"
FIGURE = ROOT / "docs" / "tuning-sweep.svg"


def documented_command() -> list[str]:
    """The first command of section 2, backslash continuations joined."""
    section = DOC.read_text(encoding="utf-8").split("## 2. Run a sweep", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    words = shlex.split(block.replace("\\\n", " "))
    assert words[:2] == ["volunteer", "replay"]
    return words[2:]


def documented_output() -> str:
    text = DOC.read_text(encoding="utf-8")
    block = text.split("<!-- sweep-output", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    return block


def normalise(text: str) -> str:
    """Timing and the number of CPUs differ between machines."""
    text = re.sub(r"with \d+ process\(es\) in [0-9.]+ s", "with N process(es) in T s", text)
    return "\n".join(line.rstrip() for line in text.splitlines())


def test_the_documented_sweep_prints_the_documented_table_and_plot(tmp_path: Path) -> None:
    args = documented_command()
    plot_at = args.index("--plot") + 1
    assert args[plot_at] == "sweep.html"
    args[plot_at] = str(tmp_path / "sweep.svg")
    result = CliRunner(mix_stderr=False).invoke(main, ["replay", *args], catch_exceptions=False, env={"COLUMNS": "140"})
    assert result.exit_code == 0, result.stderr
    assert normalise(result.stdout) == normalise(documented_output()), (
        "docs/tuning.md is stale: rerun the command of section 2 and paste its output")
    assert (tmp_path / "sweep.svg").read_text(encoding="utf-8") == FIGURE.read_text(encoding="utf-8"), (
        "docs/tuning-sweep.svg is stale: rerun the command of section 2 with --plot docs/tuning-sweep.svg")


def test_the_figure_quoted_in_the_guide_is_the_best_row() -> None:
    best = re.search(r"★ best F1 ([0-9.]+): min_confidence=([0-9.]+)", documented_output())
    assert best is not None
    assert f"**{best.group(2)}** (★, F1 {best.group(1)})" in DOC.read_text(encoding="utf-8")
