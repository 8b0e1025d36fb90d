"""Log formats: JSON lines with fields, readable console lines, the auto choice, bad settings."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import orjson
import pytest

from pipeline.logging_setup import LogSettingError, configure_logging, resolve_format, resolve_level


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    logging.captureWarnings(False)


def test_json_lines_carry_fields_and_exceptions() -> None:
    out = io.StringIO()
    assert configure_logging("json", "info", stream=out) == "json"
    log = logging.getLogger("pipeline.test")
    log.debug("not shown")
    log.info("took %d turns", 3, extra={"session_id": "s-1"})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("failed")
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [line["msg"] for line in lines] == ["took 3 turns", "failed"]
    first, second = lines
    assert list(first)[:4] == ["ts", "level", "logger", "msg"]
    assert first["level"] == "info" and first["logger"] == "pipeline.test" and first["session_id"] == "s-1"
    assert first["ts"].endswith("Z")
    assert second["level"] == "error" and "ValueError: bad" in second["exception"]


def test_console_lines_are_plain_text_and_warnings_are_captured() -> None:
    out = io.StringIO()
    assert configure_logging("console", "warning", stream=out) == "console"
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").warning("careful", extra={"session_id": "s-2"})
    import warnings

    warnings.warn("deprecated thing", UserWarning, stacklevel=1)
    text = out.getvalue()
    assert "hidden" not in text
    assert "careful" in text and "session_id=s-2" in text and "deprecated thing" in text
    assert not text.lstrip().startswith("{")
    assert "\x1b[" not in text  # not a terminal: no colour codes


def test_auto_picks_console_on_a_terminal_and_json_elsewhere() -> None:
    assert resolve_format("auto", Tty()) == "console"
    assert resolve_format("auto", io.StringIO()) == "json"
    assert resolve_format(" JSON ", Tty()) == "json"


def test_bad_format_or_level_is_one_clear_error() -> None:
    with pytest.raises(LogSettingError, match="unknown log format 'xml'; use one of: auto, json, console"):
        configure_logging("xml", "info", stream=io.StringIO())
    with pytest.raises(LogSettingError, match="unknown log level 'loud'"):
        resolve_level("loud")
    assert resolve_level("WARN") == logging.WARNING
