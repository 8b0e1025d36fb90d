"""The hook's settings, read straight from ``VOLUNTEER_*`` variables.

Not :class:`pipeline.settings.Settings`: importing pydantic-settings costs ~130 ms, half the hook's
latency budget. Bad values fall back to the defaults (a hook never fails on configuration).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.hook.protocol import DEFAULT_HARNESS, HOOK_CHANNELS

DEFAULT_URL = "http://127.0.0.1:6066"
DEFAULT_DEADLINE_MS = 800.0
DEFAULT_MAX_CHARS = 10_000
DEFAULT_WARM_TURNS = 4
MAX_WARM_TURNS = 64


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    if not math.isfinite(value):
        return default
    return min(high, max(low, value))


def default_state_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_STATE_HOME", "").strip()
    root = Path(base) if base else Path(env.get("HOME") or Path.home()) / ".local" / "state"
    return root / "volunteer" / "hooks"


def transcript_root(harness: str, env: Mapping[str, str]) -> Path:
    """Where the harness keeps its transcripts; the hook reads no transcript outside it."""
    home = Path(env.get("HOME") or Path.home())
    if harness == "codex":
        codex_home = env.get("CODEX_HOME", "").strip()
        return (Path(codex_home) if codex_home else home / ".codex") / "sessions"
    claude_dir = env.get("CLAUDE_CONFIG_DIR", "").strip()
    return (Path(claude_dir) if claude_dir else home / ".claude") / "projects"


def hooks_enabled(env: Mapping[str, str]) -> bool:
    """The kill switch: ``VOLUNTEER_HOOKS=0`` (or false/off/no) turns every hook into a no-op."""
    return env.get("VOLUNTEER_HOOKS", "").strip().lower() not in {"0", "false", "off", "no"}


@dataclass(frozen=True, slots=True)
class HookConfig:
    harness: str
    url: str
    deadline_ms: float
    max_chars: int
    warm_turns: int
    state_dir: Path
    transcript_root: Path
    source_id: str | None

    @property
    def channel(self) -> str:
        return self.harness

    @classmethod
    def from_env(cls, harness: str = DEFAULT_HARNESS, env: Mapping[str, str] | None = None) -> HookConfig:
        env = os.environ if env is None else env
        if harness not in HOOK_CHANNELS:
            harness = DEFAULT_HARNESS
        state = env.get("VOLUNTEER_HOOK_STATE_DIR", "").strip()
        source = env.get("VOLUNTEER_SOURCE", "").strip()
        return cls(
            harness=harness,
            url=(env.get("VOLUNTEER_HOOK_URL", "").strip() or DEFAULT_URL).rstrip("/"),
            deadline_ms=_number(env, "VOLUNTEER_HOOK_DEADLINE_MS", DEFAULT_DEADLINE_MS, 0, 60_000),
            max_chars=int(_number(env, "VOLUNTEER_HOOK_MAX_CHARS", DEFAULT_MAX_CHARS, 200, DEFAULT_MAX_CHARS)),
            warm_turns=int(_number(env, "VOLUNTEER_HOOK_WARM_TURNS", DEFAULT_WARM_TURNS, 0, MAX_WARM_TURNS)),
            state_dir=Path(state) if state else default_state_dir(env),
            transcript_root=transcript_root(harness, env),
            source_id=source or None,
        )
