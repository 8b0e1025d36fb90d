"""A least-privilege PostgreSQL role for workers: exactly what a ``volunteer worker`` does, nothing else.

What the worker runs, and the privilege each needs:

- load and refresh the brain: SELECT on ``pages``, ``page_aliases`` and the change counter
  ``volunteer_stream_brain_version`` (catalog views need nothing);
- write volunteered events: INSERT on ``context_volunteer_events`` and USAGE on its id sequence
  (``ON CONFLICT DO NOTHING`` needs no more);
- purge old events (leader only): SELECT of ``id`` and ``volunteered_at`` and DELETE on the events;
- the "used" signal from page opens: UPDATE of ``pages.last_retrieved_at`` only.

Everything else is refused: no DDL, no other table or column, no UPDATE of events, no write to the
brain's content. Run by whoever migrates (``volunteer migrate --create-worker-role NAME``); it is
idempotent: an existing role keeps its attributes and password and just gets the grants again.
docs/security.md lists the same statements (a unit test keeps the two in step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from sinks.db import ConnOrInfo, borrowed

GRANTS: tuple[str, ...] = (
    "GRANT CONNECT ON DATABASE {database} TO {role}",
    "GRANT USAGE ON SCHEMA {schema} TO {role}",
    "GRANT SELECT ON {schema}.pages, {schema}.page_aliases, {schema}.volunteer_stream_brain_version TO {role}",
    "GRANT UPDATE (last_retrieved_at) ON {schema}.pages TO {role}",
    "GRANT SELECT (id, volunteered_at), INSERT, DELETE ON {schema}.context_volunteer_events TO {role}",
    "GRANT USAGE ON SEQUENCE {schema}.context_volunteer_events_id_seq TO {role}",
)
"""The grants, in order; ``{database}``, ``{schema}`` and ``{role}`` are quoted identifiers."""


class RoleError(RuntimeError):
    """The role could not be created or granted; the message says why."""


@dataclass
class RoleReport:
    role: str
    created: bool
    statements: list[str] = field(default_factory=list)


def create_worker_role(target: ConnOrInfo, role: str, *, password: str | None = None) -> RoleReport:
    """Create ``role`` (LOGIN) if missing and grant it the worker's privileges, in one transaction.

    ``password`` (if given) is set whether the role is new or not; without it a new role has none
    (use certificate or peer authentication, or set one later with ALTER ROLE).
    """
    if not role or len(role) > 63:
        raise RoleError("the role name must have 1 to 63 characters")
    try:
        with borrowed(target) as conn, conn.transaction():
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone() is not None
            names = {"role": sql.Identifier(role)}
            row = conn.execute("SELECT current_database(), current_schema()").fetchone()
            assert row is not None
            names["database"], names["schema"] = sql.Identifier(row[0]), sql.Identifier(row[1])
            report = RoleReport(role, created=not exists)
            statements: list[sql.Composed] = []
            if not exists:
                statements.append(sql.SQL("CREATE ROLE {role} LOGIN").format(**names))
            if password is not None:
                statements.append(sql.SQL("ALTER ROLE {role} PASSWORD {pw}").format(pw=sql.Literal(password), **names))
            statements.extend(sql.SQL(grant).format(**names) for grant in GRANTS)
            for statement in statements:
                conn.execute(statement)
                text = statement.as_string(conn)
                report.statements.append(text if "PASSWORD" not in text else f"ALTER ROLE {role} PASSWORD ***")
            return report
    except psycopg.errors.InsufficientPrivilege as exc:
        raise RoleError(f"cannot create or grant the role {role!r}: {exc.diag.message_primary} (run it as the "
                        "owner of the tables with CREATEROLE, e.g. the role that ran 'volunteer migrate')") from None
    except psycopg.errors.UndefinedTable as exc:
        raise RoleError(f"{exc.diag.message_primary}: run 'volunteer migrate' first") from None
