"""docs/configuration.md must be exactly what scripts/gen_config_docs.py generates right now."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import click
import pytest

from pipeline.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_config_docs.py"
DOC = ROOT / "docs" / "configuration.md"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", SCRIPT)
    assert spec is not None and spec.loader is not None, f"cannot load {SCRIPT}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_committed_reference_is_up_to_date(gen: ModuleType) -> None:
    expected = gen.render()
    assert DOC.exists(), f"{DOC} is missing: run `python scripts/gen_config_docs.py`"
    current = DOC.read_text(encoding="utf-8")
    if current != expected:
        cur, exp = current.splitlines(), expected.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(cur, exp, strict=False)) if a != b), min(len(cur), len(exp)))
        pytest.fail(
            "docs/configuration.md is stale (settings or CLI flags changed): run "
            f"`python scripts/gen_config_docs.py` and commit it. First difference at line {first + 1}:\n"
            f"  committed: {cur[first] if first < len(cur) else '<end of file>'}\n"
            f"  generated: {exp[first] if first < len(exp) else '<end of file>'}"
        )


def settings_part(text: str) -> str:
    """The document without the table of single-command variables."""
    return text.split("## Variables of single commands", 1)[0]


def test_every_field_has_exactly_one_row(gen: ModuleType) -> None:
    text = settings_part(gen.render())
    rows = re.findall(r"^\| `(VOLUNTEER_[A-Z0-9_]+)` \|", text, flags=re.MULTILINE)
    wanted = [f"VOLUNTEER_{name.upper()}" for name in Settings.model_fields]
    assert sorted(rows) == sorted(wanted)
    assert len(rows) == len(set(rows))


def test_rows_carry_type_default_constraint_and_meaning(gen: ModuleType) -> None:
    text = gen.render()

    def row(var: str) -> list[str]:
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| `{var}` |"))
        return [cell.strip() for cell in line.strip("|").split(" | ")]

    partitions = row("VOLUNTEER_TOPIC_PARTITIONS")
    assert partitions[2] == "integer ≥ 1"
    assert partitions[3] == f"`{Settings.model_fields['topic_partitions'].default}`"
    assert partitions[4] == Settings.model_fields["topic_partitions"].description
    assert row("VOLUNTEER_MIN_CONFIDENCE")[2:4] == ["number, optional", "unset"]
    assert row("VOLUNTEER_LEXICAL_ARMS")[2:4] == ["boolean", "`true`"]
    assert row("VOLUNTEER_EXCLUDE_SLUG_PREFIXES")[2:4] == ["list of strings", "`[]`"]
    assert row("VOLUNTEER_SESSION_IDLE_SECONDS")[2:4] == ["number > 0", "`14400`"]


def test_sections_follow_the_comments_in_settings(gen: ModuleType) -> None:
    sections = gen.sections_of(Settings)
    assert set(sections) == set(Settings.model_fields)
    assert sections["broker"] == sections["database_url"]
    assert sections["topic_turns"] != sections["broker"]
    headings = re.findall(r"^## (.+)$", settings_part(gen.render()), flags=re.MULTILINE)
    assert len(headings) == len(set(sections.values())) >= 2


def test_flags_are_found_by_introspecting_commands(gen: ModuleType) -> None:
    """A fake CLI: same-name options, ``--no-x`` switches and nested groups map to the fields."""

    @click.group()
    def cli() -> None: ...

    @cli.command("run")
    @click.option("--window-turns", type=float)
    @click.option("--no-lexical-arms", "no_lexical_arms", is_flag=True)
    @click.option("--json", "as_json", is_flag=True)
    def run(window_turns: float, no_lexical_arms: bool, as_json: bool) -> None: ...

    @cli.group("brain")
    def brain() -> None: ...

    @brain.command("import")
    @click.option("--db", "database_url")
    @click.option("--days", "retention", help="Keep N days (default: VOLUNTEER_PURGE_RETENTION_DAYS).")
    @click.option("--size", envvar="VOLUNTEER_PURGE_BATCH_SIZE")
    @click.option("--cron", help="Unrelated: mentions VOLUNTEER_PURGE_CRONX only.")
    def brain_import(database_url: str, retention: str, size: str, cron: str) -> None: ...

    fields = ["window_turns", "lexical_arms", "database_url", "broker", "purge_retention_days",
              "purge_batch_size", "purge_cron"]
    flags = gen.flags_by_field(cli, fields)
    assert flags["window_turns"] == [("--window-turns", ["run"])]
    assert flags["lexical_arms"] == [("--no-lexical-arms", ["run"])]
    assert flags["database_url"] == [("--db", ["brain import"])]
    assert flags["purge_retention_days"] == [("--days", ["brain import"])]
    assert flags["purge_batch_size"] == [("--size", ["brain import"])]
    assert flags["purge_cron"] == []
    assert flags["broker"] == []


def test_check_mode_reports_a_stale_file(gen: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "configuration.md"
    assert gen.main(["--output", str(target)]) == 0
    assert gen.main(["--output", str(target), "--check"]) == 0
    target.write_text(target.read_text(encoding="utf-8").replace("VOLUNTEER_BROKER", "VOLUNTEER_BROKR"))
    assert gen.main(["--output", str(target), "--check"]) == 1
    assert "is stale" in capsys.readouterr().err


def test_command_only_variables_are_listed_separately(gen: ModuleType) -> None:
    @click.group()
    def cli() -> None: ...

    @cli.command("worker")
    @click.option("--brain", envvar="VOLUNTEER_BRAIN", help="Brain directory [env: VOLUNTEER_BRAIN].")
    @click.option("--broker", envvar="VOLUNTEER_BROKER")  # a setting: documented in its own row
    @click.option("--home", envvar="HOME")  # not ours
    def worker(brain: str, broker: str, home: str) -> None: ...

    found = gen.command_variables(Settings, cli)
    assert [(v.env, v.flag, v.commands, v.meaning) for v in found] == [
        ("VOLUNTEER_BRAIN", "--brain", ("worker",), "Brain directory.")
    ]
    text = gen.render(Settings, cli)
    assert "## Variables of single commands" in text
    assert "| `VOLUNTEER_BRAIN` | `--brain` | worker | Brain directory. |" in text
