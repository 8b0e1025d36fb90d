"""The hook's settings, read straight from ``VOLUNTEER_*`` variables (or the same-named flags).

Not :class:`pipeline.settings.Settings`: importing pydantic (the settings model) costs ~0.1 s of
CPU, more than the whole hook. Like every module the hook process loads, this one imports only light stdlib modules
(no dataclasses, pathlib or typing at run time). Bad values fall back to the defaults: a hook never
fails on configuration.
"""

from __future__ import annotations

import os

from pipeline.hook.credential import state_base
from pipeline.hook.protocol import DEFAULT_HARNESS
from topics.delivery import HOOK_CHANNELS

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_DEADLINE_MS = 800.0
DEFAULT_MAX_CHARS = 10_000
DEFAULT_WARM_TURNS = 4
MAX_WARM_TURNS = 64

OPTIONS: tuple[tuple[str, str, str], ...] = (
    # (flag, variable, help): the flags of 'volunteer hook user-prompt', each mirroring a variable.
    ("--url", "VOLUNTEER_HOOK_URL",
     "A worker's web address; default: the live workers of this stack in the worker registry."),
    ("--deadline-ms", "VOLUNTEER_HOOK_DEADLINE_MS", "Total time budget from process start (default 800)."),
    ("--max-chars", "VOLUNTEER_HOOK_MAX_CHARS", "Output cap in characters (default and maximum 10000)."),
    ("--warm-turns", "VOLUNTEER_HOOK_WARM_TURNS",
     "Transcript turns sent with a session's first prompt, and at most that many replies later (default 4)."),
    ("--state-dir", "VOLUNTEER_HOOK_STATE_DIR",
     "Per-session state and the heartbeat (default ~/.local/state/volunteer/hooks)."),
    ("--broker", "VOLUNTEER_BROKER", "The stack's broker, as the worker was given it (picks the stack's workers)."),
    ("--app-id", "VOLUNTEER_APP_ID", "The stack's app id (default volunteer-stream)."),
    ("--ca-file", "VOLUNTEER_WEB_TLS_CAFILE", "CA bundle that verifies https:// workers (default: the system's)."),
    ("--source", "VOLUNTEER_SOURCE", "Brain source to resolve against (default: the worker's)."),
    ("--enabled", "VOLUNTEER_HOOKS", "Kill switch: 0, false, off or no makes the hook do nothing at all."),
    ("--pressure", "VOLUNTEER_HOOK_PRESSURE",
     "on: Claude Code prompts carry one save-before-compaction notice per compaction segment when the "
     "context is about 80 percent full (default off)."),
    ("--pressure-ratio", "VOLUNTEER_HOOK_PRESSURE_RATIO", "Fill at which the notice fires, 0.5-0.95 (default 0.8)."),
    ("--pressure-window", "VOLUNTEER_HOOK_PRESSURE_WINDOW",
     "Context window in tokens, 8000-10000000 (default: detected, 200000 or 1000000)."),
)


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    if value - value != 0:  # inf or NaN (math.isfinite, without loading math)
        return default
    return min(high, max(low, value))


def _home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def default_state_dir(env: Mapping[str, str]) -> str:
    """``<state dir>/hooks`` (see :func:`pipeline.hook.credential.state_base`)."""
    return os.path.join(state_base(env), "hooks")


def transcript_root(harness: str, env: Mapping[str, str]) -> str:
    """Where the harness keeps its transcripts; the hook reads no transcript outside it."""
    if harness == "codex":
        return os.path.join(env.get("CODEX_HOME", "").strip() or os.path.join(_home(env), ".codex"), "sessions")
    return os.path.join(env.get("CLAUDE_CONFIG_DIR", "").strip() or os.path.join(_home(env), ".claude"), "projects")


def pressure_enabled(env: Mapping[str, str]) -> bool:
    """``VOLUNTEER_HOOK_PRESSURE``: on only when set to 1, true, on or yes (off by default)."""
    return env.get("VOLUNTEER_HOOK_PRESSURE", "").strip().lower() in {"1", "true", "on", "yes"}


def hooks_enabled(env: Mapping[str, str]) -> bool:
    """The kill switch: ``VOLUNTEER_HOOKS=0`` (or false/off/no) turns every hook into a no-op."""
    return env.get("VOLUNTEER_HOOKS", "").strip().lower() not in {"0", "false", "off", "no"}


class HookConfig:
    __slots__ = ("cafile", "deadline_ms", "env", "harness", "max_chars", "pressure", "pressure_ratio",
                 "pressure_window", "source_id", "state_base", "state_dir", "transcript_root", "url", "warm_turns")

    def __init__(self, harness: str, url: str | None, deadline_ms: float, max_chars: int, warm_turns: int,
                 state_dir: str, transcript_root: str, source_id: str | None, *, state_base: str = "",
                 cafile: str | None = None, env: Mapping[str, str] | None = None, pressure: bool = False,
                 pressure_ratio: float = 0.8, pressure_window: int | None = None) -> None:
        self.harness = harness
        self.url = url  # None: find the stack's workers in the registry (pipeline.hook.registry)
        self.state_base = state_base
        self.cafile = cafile
        self.env = env if env is not None else {}
        self.deadline_ms = deadline_ms
        self.max_chars = max_chars
        self.warm_turns = warm_turns
        self.state_dir = state_dir
        self.transcript_root = transcript_root
        self.source_id = source_id
        self.pressure = pressure  # the context-pressure notice (pipeline.hook.pressure); Claude Code only
        self.pressure_ratio = pressure_ratio
        self.pressure_window = pressure_window

    @property
    def channel(self) -> str:
        return self.harness

    @classmethod
    def from_env(cls, harness: str = DEFAULT_HARNESS, env: Mapping[str, str] | None = None) -> HookConfig:
        env = os.environ if env is None else env
        if harness not in HOOK_CHANNELS:
            harness = DEFAULT_HARNESS
        source = env.get("VOLUNTEER_SOURCE", "").strip()
        url = env.get("VOLUNTEER_HOOK_URL", "").strip().rstrip("/")
        return cls(
            harness=harness,
            url=url or None,
            deadline_ms=_number(env, "VOLUNTEER_HOOK_DEADLINE_MS", DEFAULT_DEADLINE_MS, 0, 60_000),
            max_chars=int(_number(env, "VOLUNTEER_HOOK_MAX_CHARS", DEFAULT_MAX_CHARS, 200, DEFAULT_MAX_CHARS)),
            warm_turns=int(_number(env, "VOLUNTEER_HOOK_WARM_TURNS", DEFAULT_WARM_TURNS, 0, MAX_WARM_TURNS)),
            state_dir=env.get("VOLUNTEER_HOOK_STATE_DIR", "").strip() or default_state_dir(env),
            transcript_root=transcript_root(harness, env),
            source_id=source or None,
            state_base=state_base(env),
            cafile=env.get("VOLUNTEER_WEB_TLS_CAFILE", "").strip() or None,
            env=env,
            **_pressure_settings(harness, env),
        )


def _pressure_settings(harness: str, env: Mapping[str, str]) -> dict[str, Any]:
    """The notice's settings; the parsing module is imported only when the notice is on."""
    if harness != "claude-code" or not pressure_enabled(env):  # usage is read from Claude Code transcripts only
        return {}
    from pipeline.hook.pressure import parse_ratio, parse_window

    return {"pressure": True, "pressure_ratio": parse_ratio(env.get("VOLUNTEER_HOOK_PRESSURE_RATIO", "")),
            "pressure_window": parse_window(env.get("VOLUNTEER_HOOK_PRESSURE_WINDOW", ""))}
