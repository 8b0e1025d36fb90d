"""The shared options of ``pipeline/cli/options.py``: one copy of each flag, the same on every command."""

from __future__ import annotations

import click
import pytest

from pipeline.cli import main
from pipeline.cli.options import (
    DECISION_FLAG_NAMES,
    decision_options_from_flags,
    given_decision_flags,
    settings_if_set,
)
from pipeline.replay import DEFAULT_SOURCE
from pipeline.settings import Settings, load_settings
from pipeline.settings_env import ENV_PREFIX
from topics.records import DEFAULT_MAX_TEXT_BYTES


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


def _no_volunteer_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.lower().startswith(ENV_PREFIX.lower()):
            monkeypatch.delenv(key)


FLAG_SETS = [
    {},
    {"window_turns": "8", "max_pages": "2", "min_confidence": "0.6", "no_lexical_arms": True,
     "exclude_prefixes": ("drafts/",)},
]


@pytest.mark.parametrize("flags", FLAG_SETS)
def test_without_volunteer_variables_the_core_defaults_are_the_settings_defaults(
        monkeypatch: pytest.MonkeyPatch, flags: dict[str, object]) -> None:
    """What ``settings_if_set() is None`` relies on: replay then reads no settings and must decide the same.

    Equal, not identical: the settings' window is the float 4.0, the core's the int 4; the core uses
    only the clamped int (``effective_window_turns``), and a sweep, whose report prints the knob,
    reads the settings."""
    _no_volunteer_variables(monkeypatch)
    assert settings_if_set() is None
    settings = Settings()
    light, full = decision_options_from_flags(None, flags), decision_options_from_flags(settings, flags)
    assert light == full and light.effective_window_turns == full.effective_window_turns
    assert (settings.source, settings.max_text_bytes) == (DEFAULT_SOURCE, DEFAULT_MAX_TEXT_BYTES)


@pytest.mark.parametrize("name", ["VOLUNTEER_MAX_PAGES", "volunteer_brain", "Volunteer_Anything"])
def test_any_volunteer_variable_means_the_settings_are_read_and_validated(
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    _no_volunteer_variables(monkeypatch)
    monkeypatch.setenv(name, "2")
    settings = settings_if_set()
    assert isinstance(settings, Settings)
    assert settings.max_pages == (2 if name == "VOLUNTEER_MAX_PAGES" else None)
    monkeypatch.setenv("VOLUNTEER_WEB_PORT", "70000")
    with pytest.raises(click.ClickException, match="bad setting VOLUNTEER_WEB_PORT"):
        settings_if_set()
