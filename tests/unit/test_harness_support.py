"""The harness installer's skip/fail split: no npm means skip (with the reason), never a silent pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import harness_cli
from tests.support.harness_cli import Harness, NpmMissing, install


def test_missing_npm_and_empty_cache_raise_npm_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLUNTEER_HARNESS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    ghost = Harness("claude-code", "@anthropic-ai/claude-code", "0.0.0-none", "claude")
    with pytest.raises(NpmMissing, match="npm is not on PATH"):
        install(ghost)
    assert ghost not in harness_cli._verified


def test_cache_dir_is_keyed_by_name_and_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOLUNTEER_HARNESS_CACHE", str(tmp_path))
    assert harness_cli.CODEX.cache_dir == tmp_path / "codex-0.169.0"
    assert harness_cli.CLAUDE_CODE.binary == tmp_path / "claude-code-2.1.328" / "node_modules" / ".bin" / "claude"
