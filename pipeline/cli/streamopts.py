"""Options shared by the stream commands (worker, feed, watch, demo): broker and decision flags."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from pipeline.core.session import DecisionOptions
from pipeline.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


def broker_option(func: F) -> F:
    return click.option(
        "--broker", metavar="URL", default=None,
        help="Kafka bootstrap servers, e.g. kafka://127.0.0.1:9092 (comma-separated for several); "
             "tansu://HOST:PORT is the embedded broker of 'volunteer up' [env: VOLUNTEER_BROKER].",
    )(func)


def decision_flags(func: F) -> F:
    """The decision flags of ``volunteer replay``, so a worker can be tuned the same way."""
    options = [
        click.option("--window-turns", metavar="N", default=None,
                     help="Rolling window per session (default 4; clamped to 1-64, fractions floor)."),
        click.option("--max-pages", metavar="N", default=None,
                     help="Pages per turn, 1-5 (default 3; below 1 means 3)."),
        click.option("--min-confidence", metavar="X", default=None,
                     help="Confidence gate in [0, 1] (default 0.7; out of range means 0.7)."),
        click.option("--source", metavar="ID", default=None,
                     help="Brain source for turns that do not name one (default: default)."),
        click.option("--no-lexical-arms", is_flag=True, default=False,
                     help="Turn off the weak-alias, surname and CJK arms."),
        click.option("--exclude-slug-prefix", "exclude_prefixes", multiple=True, metavar="PREFIX",
                     help="Never volunteer slugs starting with PREFIX; repeatable."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def decision_options_from_flags(settings: Settings, flags: Mapping[str, Any]) -> DecisionOptions:
    """Flags win over settings (``VOLUNTEER_*``); numbers are read like the reference reads them."""
    from pipeline.cli.context_cmd import number_option

    def num(name: str, fallback: Any) -> Any:
        text = flags.get(name)
        return number_option(text) if text is not None else fallback

    prefixes = tuple(flags.get("exclude_prefixes") or ()) or tuple(settings.exclude_slug_prefixes)
    return DecisionOptions(
        window_turns=num("window_turns", settings.window_turns),
        max_pages=num("max_pages", settings.max_pages),
        min_confidence=num("min_confidence", settings.min_confidence),
        lexical_arms=settings.lexical_arms and not flags.get("no_lexical_arms"),
        exclude_slug_prefixes=prefixes,
    )


def quiet_client_logs() -> None:
    """Command-line clients report broker trouble as one ``Error:`` line; aiokafka's own
    connection-failure log lines would only repeat it."""
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


def settings_with_flags(flags: Mapping[str, Any], **overrides: Any) -> Settings:
    """Settings from the environment plus flags, as a one-line error if a ``VOLUNTEER_*`` value is bad."""
    from pipeline.cli.context_cmd import settings_or_fail

    values = dict(overrides)
    if flags.get("source"):
        values["source"] = flags["source"]
    settings: Settings = settings_or_fail(**values)
    return settings
