"""The context-pressure notice's pure parts: measuring a Claude Code transcript's fill, the window,
when it fires (ratio and growth), once per compaction segment, and the settings' parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.hook.config import HookConfig, pressure_enabled
from pipeline.hook.pressure import (
    DEFAULT_WARN_RATIO,
    DEFAULT_WINDOW,
    LARGE_WINDOW,
    START_SEGMENT,
    Measured,
    context_window,
    decide,
    measure,
    notice,
    parse_ratio,
    parse_window,
    read_tail,
    should_warn,
)


def assistant(inp: int, cache_create: int = 0, cache_read: int = 0, model: str = "claude-sonnet-5-5") -> bytes:
    return orjson.dumps({"type": "assistant", "message": {"role": "assistant", "model": model, "content": [
        {"type": "text", "text": "ok"}], "usage": {"input_tokens": inp, "cache_creation_input_tokens": cache_create,
                                                   "cache_read_input_tokens": cache_read, "output_tokens": 99}}})


def user(text: str = "hi") -> bytes:
    return orjson.dumps({"type": "user", "message": {"role": "user", "content": text}})


def boundary(uuid: str) -> bytes:
    return orjson.dumps({"type": "system", "subtype": "compact_boundary", "uuid": uuid})


def jsonl(*lines: bytes) -> str:
    return b"\n".join(lines).decode() + "\n"


def test_measure_reads_the_newest_usage_and_boundary() -> None:
    text = jsonl(boundary("b1"), assistant(10, 5, 5), user(), assistant(1000, 200, 30_000, model="m2"), user())
    m = measure(text)
    assert m is not None
    assert (m.used, m.model, m.boundary) == (31_200, "m2", "b1")  # output tokens are not context


def test_measure_without_a_boundary_or_usage() -> None:
    m = measure(jsonl(user(), assistant(7)))
    assert m is not None and (m.used, m.boundary) == (7, None)
    assert measure(jsonl(user(), user("x"))) is None
    assert measure("") is None
    assert measure("not json\n{broken\n") is None
    # usage of zero tokens is no measurement
    assert measure(jsonl(assistant(0))) is None


def test_nothing_measured_since_the_newest_compaction_means_no_measurement() -> None:
    assert measure(jsonl(assistant(150_000), boundary("b2"), user())) is None


def test_hostile_values_are_ignored() -> None:
    row = {"type": "assistant", "message": {"usage": {"input_tokens": "9", "cache_read_input_tokens": True,
                                                      "cache_creation_input_tokens": -5}}}
    assert measure(orjson.dumps(row).decode()) is None
    row["message"]["usage"]["input_tokens"] = 12  # type: ignore[index]
    m = measure(orjson.dumps(row).decode())
    assert m is not None and (m.used, m.model) == (12, None)


def test_read_tail_drops_the_partial_first_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"A" * 50 + b"\n" + assistant(42) + b"\n")
    assert read_tail(str(path)) == path.read_text()
    tail = read_tail(str(path), limit=len(assistant(42)) + 5)
    assert tail == assistant(42).decode() + "\n"
    m = measure(tail or "")
    assert m is not None and m.used == 42
    assert read_tail(str(tmp_path / "missing.jsonl")) is None


def test_context_window() -> None:
    assert context_window(None, "claude-sonnet-5-5", 10) == DEFAULT_WINDOW
    assert context_window(None, "claude-opus-5[1m]", 10) == LARGE_WINDOW
    assert context_window(None, "x-1M", 10) == LARGE_WINDOW  # case does not matter
    assert context_window(None, None, DEFAULT_WINDOW + 1) == LARGE_WINDOW  # only a large window holds that
    assert context_window(None, None, DEFAULT_WINDOW) == DEFAULT_WINDOW
    assert context_window(32_000, "claude-opus-5[1m]", 900_000) == 32_000


def test_should_warn_at_the_ratio_or_when_growing_fast() -> None:
    assert should_warn(160_000, 200_000, 0.8, 0)
    assert not should_warn(159_999, 200_000, 0.8, 0)
    # 2 more turns of 20,000 reach 184,000 = 92 %: the next turn may already be compacted
    assert should_warn(144_000, 200_000, 0.8, 20_000)
    assert not should_warn(143_999, 200_000, 0.8, 20_000)
    assert not should_warn(100, 0, 0.8, 0)


def test_decide_fires_once_per_segment_and_only_once_printed() -> None:
    first = decide(None, Measured(100_000, None, None))
    assert (first.fire, first.percent, first.window, first.reason) == (False, 50, DEFAULT_WINDOW, "below_threshold")
    assert first.state == {"segment": START_SEGMENT, "warned": False, "max_seen": 100_000, "last_used": 100_000}
    hot = decide(first.state, Measured(165_000, None, None))
    assert (hot.fire, hot.percent, hot.reason) == (True, 83, "fire")  # 82.5 rounds half up
    assert hot.state["warned"] is False  # not yet: the hook may still fail to print it
    assert "83% full" in hot.text()
    again = decide(hot.state, Measured(170_000, None, None))  # not printed last time: fires again
    assert again.fire
    done = again.printed()
    assert done["warned"] is True
    later = decide(done, Measured(190_000, None, None))
    assert (later.fire, later.reason) == (False, "already_warned")
    assert later.state["warned"] is True
    # a compaction starts a new segment: the notice may come once more
    fresh = decide(later.state, Measured(170_000, None, "b9"))
    assert fresh.fire and fresh.state["segment"] == "b9"
    # the same boundary seen again is the same segment
    assert not decide(fresh.printed(), Measured(175_000, None, "b9")).fire


def test_decide_fires_early_on_fast_growth() -> None:
    state = decide(None, Measured(100_000, None, None)).state
    fast = decide(state, Measured(140_000, None, None))  # +40,000 a turn: 2 more reach 220,000
    assert fast.fire and fast.percent == 70
    slow = decide(state, Measured(110_000, None, None))
    assert not slow.fire


def test_decide_with_a_configured_window_and_ratio() -> None:
    assert decide(None, Measured(26_000, None, None), 0.8, 32_000).fire
    assert not decide(None, Measured(26_000, None, None), 0.9, 32_000).fire
    assert not decide(None, Measured(26_000, None, None)).fire


@pytest.mark.parametrize("previous", [None, [], "x", {"segment": 3}, {"warned": True}])
def test_decide_ignores_a_malformed_previous_state(previous: Any) -> None:
    d = decide(previous, Measured(180_000, None, None))
    assert d.fire and d.state["segment"] == START_SEGMENT


def test_percent_is_capped_below_100() -> None:
    d = decide(None, Measured(250_000, "m[1m]", None), 0.8, 200_000)
    assert d.percent == 99
    assert notice(99).count("\n") == 0


def test_settings_parsing() -> None:
    assert parse_ratio("0.9") == 0.9
    assert parse_ratio("0.96") == DEFAULT_WARN_RATIO
    assert parse_ratio("nope") == DEFAULT_WARN_RATIO
    assert parse_window("32000") == 32_000
    assert parse_window("7999") is None
    assert parse_window("1.5") is None
    assert parse_window("") is None
    assert [pressure_enabled({"VOLUNTEER_HOOK_PRESSURE": v}) for v in ("on", "TRUE", "1", "yes", "off", "", "2")] == [
        True, True, True, True, False, False, False]
    assert not pressure_enabled({})


def test_hook_config_turns_it_on_for_claude_code_only() -> None:
    env = {"HOME": "/tmp/h", "VOLUNTEER_HOOK_PRESSURE": "on", "VOLUNTEER_HOOK_PRESSURE_RATIO": "0.7",
           "VOLUNTEER_HOOK_PRESSURE_WINDOW": "64000"}
    cfg = HookConfig.from_env("claude-code", env)
    assert (cfg.pressure, cfg.pressure_ratio, cfg.pressure_window) == (True, 0.7, 64_000)
    assert not HookConfig.from_env("codex", env).pressure
    default = HookConfig.from_env("claude-code", {"HOME": "/tmp/h"})
    assert (default.pressure, default.pressure_ratio, default.pressure_window) == (False, 0.8, None)
