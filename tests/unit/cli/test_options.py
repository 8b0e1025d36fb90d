"""The shared options of ``pipeline/cli/options.py``: one copy of each flag, the same on every command."""

from __future__ import annotations

import click
import pytest

from pipeline.cli import main
from pipeline.cli.options import DECISION_FLAG_NAMES, decision_options_from_flags, given_decision_flags
from pipeline.settings import load_settings


def _options(name: str) -> dict[str, tuple[str, ...]]:
    """``--flag`` -> (its help, metavar, multiple) on the command ``name``."""
    command = main.get_command(click.Context(main), name)
    assert command is not None
    out = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for flag in param.opts:
                out[flag] = (param.help or "", param.metavar or "", str(param.multiple))
    return out


def test_worker_and_replay_take_the_same_decision_flags() -> None:
    worker, replay = _options("worker"), _options("replay")
    flags = list(DECISION_FLAG_NAMES.values())
    assert {f: worker[f] for f in flags} == {f: replay[f] for f in flags}
    assert all(worker[f][0] for f in flags)  # every flag explains itself in --help


def test_the_op_commands_share_the_gate_flags() -> None:
    context, mcp, worker = _options("context"), _options("mcp"), _options("worker")
    for flag in ("--max-pages", "--min-confidence", "--no-lexical-arms", "--exclude-slug-prefix"):
        assert context[flag] == mcp[flag] == worker[flag]
    assert "--window-turns" not in context and context["--source"][2] == "True"  # its own, repeatable


def test_flags_win_over_settings_and_numbers_read_like_the_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLUNTEER_MAX_PAGES", "2")
    monkeypatch.setenv("VOLUNTEER_EXCLUDE_SLUG_PREFIXES", '["private/"]')
    settings = load_settings()
    flags = {"window_turns": "2.7", "min_confidence": "abc", "no_lexical_arms": True, "exclude_prefixes": ()}
    options = decision_options_from_flags(settings, flags)
    assert (options.window_turns, options.max_pages, options.lexical_arms) == (2.7, 2, False)
    assert options.min_confidence != options.min_confidence  # NaN: the core falls back to 0.7
    assert options.exclude_slug_prefixes == ("private/",)
    assert given_decision_flags(flags) == ["--window-turns", "--min-confidence", "--no-lexical-arms"]
