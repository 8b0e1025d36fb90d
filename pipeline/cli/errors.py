"""The command line's safety net: errors leave every command as one masked line, never a traceback.

Commands raise :class:`click.ClickException` with their own wording; this catches what slips past
them: a bad ``VOLUNTEER_*`` value (pydantic's ``ValidationError``), a libpq error (``psycopg.Error``),
and masks the password out of every message on the way (:func:`pipeline.masking.mask`). Neither
library is imported here, only looked up in ``sys.modules``: a command that never loaded them (the
per-prompt ``volunteer hook``) pays nothing.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click

from pipeline.masking import mask


def settings_error(exc: Any) -> click.ClickException:
    """``bad setting VOLUNTEER_WEB_PORT: Input should be less than or equal to 65535`` (first error)."""
    first: dict[str, Any] = dict(exc.errors()[0])
    name = "VOLUNTEER_" + "_".join(str(p) for p in first.get("loc", ())).upper()
    message = str(first.get("msg", "invalid value")).splitlines()[0].removeprefix("Value error, ")
    return click.ClickException(mask(f"bad setting {name}: {message}"))


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn settings and database errors into one-line click errors; mask every click error."""
    try:
        yield
    except click.ClickException as exc:
        exc.message = mask(exc.message)
        raise
    except Exception as exc:
        pydantic_core = sys.modules.get("pydantic_core")  # looked up, not imported: the hook stays light
        if pydantic_core is not None and isinstance(exc, pydantic_core.ValidationError):
            raise settings_error(exc) from None
        psycopg = sys.modules.get("psycopg")
        if psycopg is not None and isinstance(exc, psycopg.Error):
            detail = " ".join(str(exc).split()) or type(exc).__name__
            raise click.ClickException(mask(f"database error: {detail}")) from None
        raise
