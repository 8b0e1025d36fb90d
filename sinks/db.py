"""Connection helpers shared by the sink modules: one place that knows libpq URLs and ownership.

Functions here accept either a conninfo (URL or ``key=value`` string) or an open connection, so the
CLI can pass a URL while the worker passes its long-lived connection; a connection we open we also
close, one we were given we leave alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pipeline.masking import mask

ConnOrInfo = str | psycopg.Connection
AsyncConnOrInfo = str | psycopg.AsyncConnection

CONNECT_TIMEOUT_S = 10
"""libpq ``connect_timeout`` for connections opened here, so a dead server fails fast."""


def with_database(conninfo: str, dbname: str) -> str:
    """The same server and credentials, another database; URLs stay URLs."""
    if conninfo.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(conninfo)
        return urlunsplit((parts.scheme, parts.netloc, "/" + quote(dbname, safe=""), parts.query, parts.fragment))
    return make_conninfo(conninfo, dbname=dbname)


def database_name(conninfo: str) -> str:
    """The database a conninfo names (libpq's default is the user name)."""
    params = conninfo_to_dict(conninfo)
    name = params.get("dbname") or params.get("user") or "postgres"
    return str(name)


def redact(conninfo: str) -> str:
    """A conninfo safe to print: any password replaced by ``***`` (:func:`pipeline.masking.mask`)."""
    return mask(conninfo)


def connect(conninfo: str, *, autocommit: bool = False) -> psycopg.Connection:
    """A sync connection with a connect timeout (the CLI's way in)."""
    return psycopg.connect(conninfo, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S)


async def connect_async(conninfo: str, *, autocommit: bool = False) -> psycopg.AsyncConnection:
    """An async connection with a connect timeout (the worker's way in)."""
    return await psycopg.AsyncConnection.connect(
        conninfo, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT_S
    )


@contextmanager
def borrowed(target: ConnOrInfo, *, autocommit: bool = False) -> Iterator[psycopg.Connection]:
    """Yield a connection: ``target`` itself, or a new one (closed afterwards) when it is a conninfo."""
    if isinstance(target, psycopg.Connection):
        yield target
        return
    conn = connect(target, autocommit=autocommit)
    try:
        yield conn
    finally:
        conn.close()


@asynccontextmanager
async def borrowed_async(
    target: AsyncConnOrInfo, *, autocommit: bool = False
) -> AsyncIterator[psycopg.AsyncConnection]:
    """Async twin of :func:`borrowed`."""
    if isinstance(target, psycopg.AsyncConnection):
        yield target
        return
    conn = await connect_async(target, autocommit=autocommit)
    try:
        yield conn
    finally:
        await conn.close()
