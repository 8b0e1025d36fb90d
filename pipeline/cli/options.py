"""The options several ``volunteer`` commands share, each written once with its help text.

- :func:`broker_option` (``--broker``): every command that talks to the broker.
- :func:`database_option` (``--database-url``) with :func:`resolve_database_url` and
  :func:`fail_on_db_error`: the database commands (migrate, purge, stats, brain import).
- :func:`brain_options` (``--brain`` / ``--database-url``): the commands that load a brain, and
  :func:`load_brain`, which loads the brain they name (imported only with the command's choice).
- :func:`decision_flags`: the decision core's knobs (``--window-turns``, ``--max-pages``,
  ``--min-confidence``, ``--source``, ``--no-lexical-arms``, ``--exclude-slug-prefix``), the same on
  ``volunteer worker`` and ``volunteer replay``, so a worker runs what a replay tuned;
  :func:`gate_flags` is the part of them the one-shot op takes (``volunteer context``, ``volunteer mcp``:
  no rolling window, and a repeatable ``--source`` of their own). :func:`decision_options_from_flags`
  and :func:`gate_values` read them, flags winning over ``VOLUNTEER_*`` settings.

Imports stay light (click only at the top): ``volunteer context`` is a per-turn tool, and the
settings (pydantic) and the database driver are imported only by the functions that need them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from pipeline.core.brain import BrainIndex
    from pipeline.core.session import DecisionOptions
    from pipeline.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


def _apply(func: F, options: list[Callable[[F], F]]) -> F:
    """Decorate with ``options`` so that ``--help`` lists them in the order given."""
    for option in reversed(options):
        func = option(func)
    return func


# ---------------------------------------------------------------------------- broker


def broker_option(func: F) -> F:
    return click.option(
        "--broker", metavar="URL", default=None,
        help="Kafka bootstrap servers, e.g. kafka://127.0.0.1:9092 (comma-separated for several); "
             "tansu://HOST:PORT is the embedded broker of 'volunteer up' [env: VOLUNTEER_BROKER].",
    )(func)


def quiet_client_logs() -> None:
    """Command-line clients report broker trouble as one ``Error:`` line; aiokafka's own
    connection-failure log lines would only repeat it."""
    import logging

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)


# ---------------------------------------------------------------------------- database


def database_option(func: F) -> F:
    """``--database-url``, defaulting to ``VOLUNTEER_DATABASE_URL`` via the settings."""
    return click.option(
        "--database-url",
        metavar="URL",
        default=None,
        help="libpq URL of the database (default: VOLUNTEER_DATABASE_URL, else "
        "postgresql://postgres@127.0.0.1:5432/postgres).",
    )(func)


def resolve_database_url(flag: str | None) -> str:
    """Flag, then environment, then the settings default."""
    from pipeline.settings import load_settings

    return load_settings(database_url=flag).database_url


@contextmanager
def fail_on_db_error(url: str) -> Iterator[None]:
    """Turn connection and SQL failures into a clear one-line click error (exit code 1)."""
    import psycopg

    from sinks.db import redact
    from sinks.schema import MigrationError

    try:
        yield
    except psycopg.OperationalError as exc:
        detail = " ".join(line.strip() for line in str(exc).strip().splitlines()) or "connection failed"
        raise click.ClickException(f"cannot reach the database at {redact(url)}: {detail}") from None
    except MigrationError as exc:
        raise click.ClickException(str(exc)) from None
    except psycopg.Error as exc:
        message = exc.diag.message_primary if exc.diag and exc.diag.message_primary else str(exc)
        raise click.ClickException(f"database error: {message}") from None


def parse_number(text: str) -> float:
    """A numeric flag read like JavaScript's ``Number()``: unparsable text is NaN (callers clamp)."""
    stripped = text.strip()
    if not stripped:
        return 0.0
    try:
        return float(stripped)
    except ValueError:
        return float("nan")


# ---------------------------------------------------------------------------- brain


def brain_options(func: F) -> F:
    """``--brain DIR`` (``VOLUNTEER_BRAIN``) or ``--database-url URL`` (``VOLUNTEER_DATABASE_URL``)."""
    return _apply(func, [
        click.option(
            "--brain", "brain_dir", metavar="DIR", envvar="VOLUNTEER_BRAIN",
            type=click.Path(file_okay=False, path_type=str),
            help="Brain directory: DIR/pages.jsonl (+ optional DIR/aliases.jsonl). Wins over --database-url "
                 "[env: VOLUNTEER_BRAIN].",
        ),
        click.option(
            "--database-url", metavar="URL", envvar="VOLUNTEER_DATABASE_URL",
            help="Load the brain from this PostgreSQL database (pages + page_aliases) instead of a directory "
                 "[env: VOLUNTEER_DATABASE_URL].",
        ),
    ])


def load_brain(brain_dir: str | None, database_url: str | None, source_ids: Sequence[str] | None) -> BrainIndex:
    """The brain named by the options, or a one-line ``click`` error saying what to pass."""
    if brain_dir:
        from pipeline.braindir import BrainDirError, load_brain_dir

        try:
            return load_brain_dir(brain_dir)
        except (BrainDirError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
    if database_url:
        try:
            from sinks.brain_pg import load_brain as load_pg_brain
        except ImportError as exc:
            raise click.ClickException(f"the PostgreSQL brain loader is not available ({exc}); use --brain DIR") from None
        with fail_on_db_error(database_url):
            return load_pg_brain(database_url, list(source_ids) if source_ids else None)
    raise click.UsageError(
        "no brain: pass --brain DIR (or set VOLUNTEER_BRAIN), or --database-url URL "
        "(or set VOLUNTEER_DATABASE_URL). Try --brain with the bundled sample: "
        f"--brain {sample_brain_dir()}"
    )


def sample_brain_dir() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent / "samples" / "brain")


# ---------------------------------------------------------------------------- decision flags

_WINDOW_TURNS = click.option("--window-turns", metavar="N", default=None,
                             help="Rolling window per session (default 4; clamped to 1-64, fractions floor).")
_SOURCE = click.option("--source", metavar="ID", default=None,
                       help="Brain source for turns that do not name one (default: default).")
_GATE = [
    click.option("--max-pages", metavar="N", default=None,
                 help="Pages volunteered per turn (by the one-shot op: per call), 1-5 (default 3; below 1 means 3, fractions floor)."),
    click.option("--min-confidence", metavar="X", default=None,
                 help="Confidence gate in [0, 1] (default 0.7; out of range or not a number means 0.7)."),
]
_ARMS = [
    click.option("--no-lexical-arms", is_flag=True, default=False,
                 help="Turn off the weak-alias, surname and CJK arms (gbrain's kill switch)."),
    click.option("--exclude-slug-prefix", "exclude_prefixes", multiple=True, metavar="PREFIX",
                 help="Never volunteer slugs starting with PREFIX; repeatable."),
]


def decision_flags(func: F) -> F:
    """The decision flags of ``volunteer worker`` and ``volunteer replay`` (one copy, one help text)."""
    return _apply(func, [_WINDOW_TURNS, *_GATE, _SOURCE, *_ARMS])


def gate_flags(func: F) -> F:
    """:func:`decision_flags` without the rolling window and ``--source`` (the one-shot op's own)."""
    return _apply(func, [*_GATE, *_ARMS])


DECISION_FLAG_NAMES: dict[str, str] = {
    "window_turns": "--window-turns", "max_pages": "--max-pages", "min_confidence": "--min-confidence",
    "source": "--source", "no_lexical_arms": "--no-lexical-arms", "exclude_prefixes": "--exclude-slug-prefix",
}
"""Parameter name -> flag of :func:`decision_flags`, for messages about flags that do not apply."""


def given_decision_flags(flags: Mapping[str, Any]) -> list[str]:
    """The decision flags the command line set (``--max-pages`` …), in :data:`DECISION_FLAG_NAMES` order."""
    return [flag for name, flag in DECISION_FLAG_NAMES.items() if flags.get(name) not in (None, False, ())]


def number_option(text: str | None) -> float | None:
    """A numeric flag read like JavaScript's ``Number()``: ``abc`` is NaN (the core then uses its default)."""
    if text is None:
        return None
    from pipeline.core.jscompat import js_number

    return js_number(text)


def gate_values(settings: Settings | DecisionOptions, flags: Mapping[str, Any]) -> dict[str, Any]:
    """``max_pages``, ``min_confidence``, ``lexical_arms`` and ``exclude_slug_prefixes`` from the
    flags of :func:`gate_flags`, else the settings (``VOLUNTEER_*``); numbers read like the reference
    reads them. Both :class:`~pipeline.core.session.DecisionOptions` and the op's
    :class:`~pipeline.core.request.RequestDefaults` take them by these names."""

    def num(name: str, fallback: Any) -> Any:
        text = flags.get(name)
        return number_option(text) if text is not None else fallback

    return {
        "max_pages": num("max_pages", settings.max_pages),
        "min_confidence": num("min_confidence", settings.min_confidence),
        "lexical_arms": settings.lexical_arms and not flags.get("no_lexical_arms"),
        "exclude_slug_prefixes": tuple(flags.get("exclude_prefixes") or ()) or tuple(settings.exclude_slug_prefixes),
    }


def decision_options_from_flags(settings: Settings | None, flags: Mapping[str, Any]) -> DecisionOptions:
    """The :class:`~pipeline.core.session.DecisionOptions` of :func:`decision_flags` over the settings
    (``None``: their defaults, which are the core's own, see :func:`settings_if_set`)."""
    from pipeline.core.session import DecisionOptions

    base = DecisionOptions() if settings is None else settings
    window = flags.get("window_turns")
    return DecisionOptions(window_turns=number_option(window) if window is not None else base.window_turns,
                           **gate_values(base, flags))


# ---------------------------------------------------------------------------- settings


def settings_or_fail(**overrides: Any) -> Settings:
    """:func:`pipeline.settings.load_settings`, turning a bad ``VOLUNTEER_*`` value into a one-line error."""
    from pydantic import ValidationError

    from pipeline.cli.errors import settings_error
    from pipeline.settings import load_settings

    try:
        return load_settings(**overrides)
    except ValidationError as exc:
        raise settings_error(exc) from None


def settings_if_set() -> Settings | None:
    """:func:`settings_or_fail`, or ``None`` when no ``VOLUNTEER_*`` variable at all is set.

    Then the settings are their defaults, valid by construction, and a command that reads only the
    decision knobs, the default source and the text limit takes the same defaults from the core
    (:func:`decision_options_from_flags` with ``None``, :data:`pipeline.replay.DEFAULT_SOURCE`,
    :data:`topics.records.DEFAULT_MAX_TEXT_BYTES`; tests/unit/cli/test_options.py checks they are
    equal). ``volunteer replay`` so skips importing pydantic and building the model: a third of its
    start-up, about 0.1 s of CPU.
    """
    from pipeline.settings_env import any_variable

    return settings_or_fail() if any_variable() else None


def settings_with_flags(flags: Mapping[str, Any], **overrides: Any) -> Settings:
    """Settings from the environment plus flags (``--source`` among them), as a one-line error if a
    ``VOLUNTEER_*`` value is bad."""
    values = dict(overrides)
    if flags.get("source"):
        values["source"] = flags["source"]
    return settings_or_fail(**values)
