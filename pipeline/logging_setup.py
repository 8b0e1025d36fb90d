"""Logging for the worker and the commands: JSON lines in production, readable lines on a terminal.

``VOLUNTEER_LOG_FORMAT``: ``json`` (one JSON object per line: ``ts``, ``level``, ``logger``, ``msg``,
plus any ``extra`` fields such as ``session_id``, and ``exception`` with the traceback), ``console``
(aligned, coloured when the stream is a terminal), or ``auto`` (console on a terminal, else JSON).
Every record goes through the standard :mod:`logging` module, so Faust's, aiokafka's and our own
lines come out in one format; Python warnings and uncaught exceptions are routed into it too, so a
JSON log stays JSON from the first line to the last.

What is logged is counts, ids and reasons, never conversation text: the pipeline logs nothing per
turn at INFO, and the few per-session lines carry the session id as a field (``extra=``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from types import TracebackType
from typing import IO, Any

import orjson
import structlog
from structlog.typing import EventDict, Processor

from pipeline.masking import mask, process_secrets

FORMATS = ("auto", "json", "console")
LEVELS = ("debug", "info", "warning", "error", "critical")


class LogSettingError(ValueError):
    """A log format or level that does not exist; the message lists the valid ones."""


def resolve_format(fmt: str, stream: IO[str]) -> str:
    """``auto`` -> ``console`` on a terminal, ``json`` otherwise."""
    value = (fmt or "auto").strip().lower()
    if value not in FORMATS:
        raise LogSettingError(f"unknown log format {fmt!r}; use one of: {', '.join(FORMATS)}")
    if value == "auto":
        try:
            return "console" if stream.isatty() else "json"
        except (AttributeError, ValueError):
            return "json"
    return value


def resolve_level(level: str | int) -> int:
    if isinstance(level, int):
        return level
    name = (level or "info").strip().lower()
    if name == "warn":
        name = "warning"
    if name not in LEVELS:
        raise LogSettingError(f"unknown log level {level!r}; use one of: {', '.join(LEVELS)}")
    return int(getattr(logging, name.upper()))


def _json_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode("utf-8")


def _rename(event_dict: EventDict) -> EventDict:
    if "event" in event_dict:
        event_dict["msg"] = event_dict.pop("event")
    return event_dict


def _drop_color_message(_: Any, __: str, event_dict: EventDict) -> EventDict:
    event_dict.pop("color_message", None)
    return event_dict


def _shared(stamper: Processor) -> list[Processor]:
    return [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        _drop_color_message,
        stamper,
    ]


def _ordered(_: Any, __: str, event_dict: EventDict) -> EventDict:
    """``ts, level, logger, msg`` first, then the rest: easier to read with ``jq -c`` or ``grep``."""
    event_dict = _rename(event_dict)
    head = {k: event_dict.pop(k) for k in ("ts", "level", "logger", "msg") if k in event_dict}
    head.update(event_dict)
    return head


class MaskingFormatter(logging.Formatter):
    """Another formatter's lines with passwords masked: a libpq error quoted in any log line
    (the worker's, Faust's, aiokafka's) never carries the database password."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner
        self._secrets = process_secrets()

    def format(self, record: logging.LogRecord) -> str:
        return mask(self._inner.format(record), self._secrets)


def make_formatter(fmt: str, *, colors: bool = False) -> logging.Formatter:
    """The formatter for ``json`` or ``console`` (already resolved), passwords masked."""
    return MaskingFormatter(_make_formatter(fmt, colors=colors))


def _make_formatter(fmt: str, *, colors: bool = False) -> logging.Formatter:
    if fmt == "json":
        final: list[Processor] = [
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _exception_key,
            _ordered,
            structlog.processors.JSONRenderer(serializer=_json_dumps),
        ]
        stamper = structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts")
        return structlog.stdlib.ProcessorFormatter(foreign_pre_chain=_shared(stamper), processors=final)
    renderer: Processor = structlog.dev.ConsoleRenderer(colors=colors, exception_formatter=structlog.dev.plain_traceback)
    local_time = structlog.processors.TimeStamper(fmt="%Y-%m-%d %H:%M:%S", utc=False, key="timestamp")
    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared(local_time),
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
    )


def _exception_key(_: Any, __: str, event_dict: EventDict) -> EventDict:
    if "exception" in event_dict and not event_dict["exception"]:
        event_dict.pop("exception")
    return event_dict


_installed_hook: Callable[..., Any] | None = None


def _excepthook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, tb)
        return
    logging.getLogger("volunteer").critical("uncaught exception", exc_info=(kind, value, tb))


def configure_logging(fmt: str = "auto", level: str | int = "info", *, stream: IO[str] | None = None) -> str:
    """Send every log record to ``stream`` (stderr by default) in ``fmt``; returns the resolved format.

    Idempotent: calling it again replaces the handler (e.g. once settings are known, once the CLI's
    ``--loglevel`` is). Raises :class:`LogSettingError` for an unknown format or level.
    """
    out = stream if stream is not None else sys.stderr
    resolved = resolve_format(fmt, out)
    number = resolve_level(level)
    try:
        colors = resolved == "console" and out.isatty()
    except (AttributeError, ValueError):
        colors = False
    handler = logging.StreamHandler(out)
    handler.setFormatter(make_formatter(resolved, colors=colors))
    handler.set_name("volunteer")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(number)
    logging.captureWarnings(True)
    global _installed_hook
    if sys.excepthook is not _excepthook:
        _installed_hook = sys.excepthook
        sys.excepthook = _excepthook
    return resolved
