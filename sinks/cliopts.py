"""Shared bits of the database commands (migrate, purge, stats, brain import): one option, one
error style. A database problem ends the command with a one-line ``Error: ...`` and exit code 1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


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
    """Turn connection and SQL failures into a clear one-line click error."""
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
