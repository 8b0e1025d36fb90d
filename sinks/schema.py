"""Database migrations: create what is missing, never drop or rewrite existing gbrain data.

Every step is idempotent (``IF NOT EXISTS``, existence checks), and every run re-checks every step,
so a dropped index comes back and a half-applied run completes. ``volunteer_stream_schema`` records
which versions have run, when, and any note (for example the identity-index fallback). A
session-level advisory lock serialises concurrent ``migrate`` calls from several workers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources

import psycopg
from psycopg import errors, sql

from sinks.db import ConnOrInfo, borrowed

SCHEMA_TABLE = "volunteer_stream_schema"
MIGRATION_LOCK_KEY = 0x766F6C756E746565  # "voluntee": any fixed bigint, shared by every migrator

EVENTS_TABLE = "context_volunteer_events"
IDENTITY_COLUMNS = ("source_id", "channel", "session_id", "turn", "slug")
IDENTITY_INDEX = "context_volunteer_events_identity_key"
IDENTITY_PARTIAL_INDEX = "context_volunteer_events_identity_new_key"

BRAIN_TRIGGERS: dict[str, tuple[tuple[str, str], ...]] = {
    # table -> (trigger name, trigger definition tail)
    "pages": (
        ("volunteer_stream_brain_ins_del", "AFTER INSERT OR DELETE ON pages"),
        (
            "volunteer_stream_brain_upd",
            "AFTER UPDATE OF source_id, slug, type, title, compiled_truth, frontmatter, deleted_at ON pages",
        ),
    ),
    "page_aliases": (
        ("volunteer_stream_brain_ins_del", "AFTER INSERT OR DELETE ON page_aliases"),
        ("volunteer_stream_brain_upd", "AFTER UPDATE OF source_id, alias_norm, slug ON page_aliases"),
    ),
}
BRAIN_UPDATE_WHEN = {
    # Only updates that change what the decision core reads bump the version: gbrain writes
    # pages.last_retrieved_at on every read, and that must not make every worker reload the brain.
    "pages": "(OLD.source_id, OLD.slug, OLD.type, OLD.title, OLD.compiled_truth, OLD.frontmatter, "
    "OLD.deleted_at IS NULL) IS DISTINCT FROM (NEW.source_id, NEW.slug, NEW.type, NEW.title, "
    "NEW.compiled_truth, NEW.frontmatter, NEW.deleted_at IS NULL)",
    "page_aliases": "(OLD.source_id, OLD.alias_norm, OLD.slug) IS DISTINCT FROM "
    "(NEW.source_id, NEW.alias_norm, NEW.slug)",
}
BRAIN_TRUNCATE_TRIGGER = "volunteer_stream_brain_truncate"


class MigrationError(RuntimeError):
    """A migration step failed; the message says which and why."""


@dataclass
class MigrationReport:
    """What one ``migrate`` run did."""

    applied: list[str] = field(default_factory=list)
    """Versions recorded for the first time in this run, as ``"0003 context_volunteer_events"``."""
    already: list[str] = field(default_factory=list)
    """Versions that were already recorded (their steps were re-checked anyway)."""
    warnings: list[str] = field(default_factory=list)
    """Things the operator should know: fallbacks taken instead of failing."""


StepResult = str  # a note for the schema table ('' when nothing to say)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    apply: Callable[[psycopg.Connection, MigrationReport], StepResult]

    @property
    def label(self) -> str:
        return f"{self.version:04d} {self.name}"


def _sql_file(name: str) -> Callable[[psycopg.Connection, MigrationReport], StepResult]:
    def run(conn: psycopg.Connection, report: MigrationReport) -> StepResult:
        text = resources.files("sinks").joinpath("sql", name).read_text(encoding="utf-8")
        conn.execute(text.encode("utf-8"))
        return ""

    return run


def _index_exists(conn: psycopg.Connection, name: str) -> bool:
    """Whether a relation (index or table) of that name is visible on the search path."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
    return bool(row and row[0])


def _ensure_identity_index(conn: psycopg.Connection, report: MigrationReport) -> StepResult:
    """Unique index over the event identity, for ``INSERT ... ON CONFLICT DO NOTHING``.

    Rows with a NULL ``session_id`` or ``turn`` (gbrain's own op/reflex rows) never conflict,
    because a unique index treats NULLs as distinct. If an existing gbrain table already holds
    duplicate identities, nothing is deleted: the index is made partial over rows newer than the
    current maximum id, so every row this service writes is still deduplicated; a later
    ``migrate`` (e.g. after the old duplicates have been purged) upgrades it to the full index.
    """
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in IDENTITY_COLUMNS)
    if _index_exists(conn, IDENTITY_INDEX):
        if _index_exists(conn, IDENTITY_PARTIAL_INDEX):
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(IDENTITY_PARTIAL_INDEX)))
        return ""
    try:
        with conn.transaction():
            conn.execute(
                sql.SQL("CREATE UNIQUE INDEX {} ON {} ({})").format(
                    sql.Identifier(IDENTITY_INDEX), sql.Identifier(EVENTS_TABLE), columns
                )
            )
    except errors.UniqueViolation:
        pass
    else:
        if _index_exists(conn, IDENTITY_PARTIAL_INDEX):
            conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(IDENTITY_PARTIAL_INDEX)))
            report.warnings.append(
                f"{EVENTS_TABLE}: the old duplicate events are gone; the partial identity index was "
                f"replaced by the full unique index {IDENTITY_INDEX}"
            )
            return "upgraded from the partial index to the full unique index"
        return ""

    # Duplicates exist among rows that predate us: keep them all, dedupe everything newer.
    dup_row = conn.execute(
        sql.SQL(
            "SELECT count(*) FROM (SELECT 1 FROM {} WHERE session_id IS NOT NULL AND turn IS NOT NULL "
            "GROUP BY {} HAVING count(*) > 1) d"
        ).format(sql.Identifier(EVENTS_TABLE), columns)
    ).fetchone()
    groups = int(dup_row[0]) if dup_row else 0
    if _index_exists(conn, IDENTITY_PARTIAL_INDEX):
        note = f"partial identity index kept; {groups} duplicate identity group(s) still present"
        report.warnings.append(f"{EVENTS_TABLE}: {note} (nothing deleted)")
        return note
    max_row = conn.execute(sql.SQL("SELECT coalesce(max(id), 0) FROM {}").format(sql.Identifier(EVENTS_TABLE))).fetchone()
    max_id = int(max_row[0]) if max_row else 0
    conn.execute(
        sql.SQL("CREATE UNIQUE INDEX {} ON {} ({}) WHERE id > {}").format(
            sql.Identifier(IDENTITY_PARTIAL_INDEX), sql.Identifier(EVENTS_TABLE), columns, sql.Literal(max_id)
        )
    )
    note = (
        f"existing rows hold {groups} duplicate identity group(s); nothing was deleted. Created the "
        f"partial unique index {IDENTITY_PARTIAL_INDEX} over rows with id > {max_id}: every event "
        "written from now on is deduplicated. Run 'volunteer migrate' again once the old duplicates "
        "are purged to get the full index."
    )
    report.warnings.append(f"{EVENTS_TABLE}: {note}")
    return note


def _trigger_exists(conn: psycopg.Connection, table: str, name: str) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND tgname = %s)",
        (table, name),
    ).fetchone()
    return bool(row and row[0])


def _ensure_brain_version(conn: psycopg.Connection, report: MigrationReport) -> StepResult:
    """The change counter and its triggers; without trigger rights, fall back and say so."""
    _sql_file("0005_brain_version.sql")(conn, report)
    try:
        with conn.transaction():
            _sql_file("0005_brain_version_function.sql")(conn, report)
    except errors.InsufficientPrivilege:
        exists = conn.execute("SELECT to_regproc('volunteer_stream_bump_brain_version') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            raise
        # owned by another role (whoever migrated first): keep theirs
    missing: list[str] = []
    for table, triggers in BRAIN_TRIGGERS.items():
        try:
            with conn.transaction():
                for name, tail in triggers:
                    if _trigger_exists(conn, table, name):
                        continue
                    when = (
                        sql.SQL(" WHEN ({})").format(sql.SQL(BRAIN_UPDATE_WHEN[table]))
                        if "UPDATE" in tail
                        else sql.SQL("")
                    )
                    conn.execute(
                        sql.SQL(
                            "CREATE CONSTRAINT TRIGGER {} {} DEFERRABLE INITIALLY DEFERRED FOR EACH ROW{} "
                            "EXECUTE FUNCTION volunteer_stream_bump_brain_version()"
                        ).format(sql.Identifier(name), sql.SQL(tail), when)
                    )
                if not _trigger_exists(conn, table, BRAIN_TRUNCATE_TRIGGER):
                    conn.execute(
                        sql.SQL(
                            "CREATE TRIGGER {} AFTER TRUNCATE ON {} FOR EACH STATEMENT "
                            "EXECUTE FUNCTION volunteer_stream_bump_brain_version()"
                        ).format(sql.Identifier(BRAIN_TRUNCATE_TRIGGER), sql.Identifier(table))
                    )
        except errors.InsufficientPrivilege as exc:
            missing.append(f"{table} ({exc.diag.message_primary})")
    if missing:
        note = (
            "could not add change triggers on " + ", ".join(missing) + "; workers detect brain changes "
            "from table statistics instead (slower to notice, up to ~10 s)"
        )
        report.warnings.append(note)
        return note
    return ""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "pages", _sql_file("0001_pages.sql")),
    Migration(2, "page_aliases", _sql_file("0002_page_aliases.sql")),
    Migration(3, "context_volunteer_events", _sql_file("0003_context_volunteer_events.sql")),
    Migration(4, "context_volunteer_events identity index", _ensure_identity_index),
    Migration(5, "brain version counter", _ensure_brain_version),
)


def _recorded(conn: psycopg.Connection) -> dict[int, str]:
    if not _index_exists(conn, SCHEMA_TABLE):  # checked first: re-runs need no CREATE right on the schema
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (version INTEGER PRIMARY KEY, name TEXT NOT NULL, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now(), notes TEXT NOT NULL DEFAULT '')"
            ).format(sql.Identifier(SCHEMA_TABLE))
        )
    rows = conn.execute(sql.SQL("SELECT version, notes FROM {}").format(sql.Identifier(SCHEMA_TABLE))).fetchall()
    return {int(v): str(n) for v, n in rows}


def migrate(target: ConnOrInfo) -> MigrationReport:
    """Bring the database up to date; safe to run any number of times, concurrently.

    ``target`` is a conninfo or a sync connection (put in autocommit mode for the run: each step
    commits on its own so a failure leaves earlier steps in place).
    """
    report = MigrationReport()
    with borrowed(target, autocommit=True) as conn:
        previous_autocommit = conn.autocommit
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise MigrationError("migrate() needs a connection that is not inside a transaction")
        conn.autocommit = True
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            with conn.transaction():
                recorded = _recorded(conn)
            for migration in MIGRATIONS:
                try:
                    with conn.transaction():
                        note = migration.apply(conn, report)
                        if migration.version in recorded:
                            report.already.append(migration.label)
                            if note and note != recorded[migration.version]:
                                conn.execute(
                                    sql.SQL("UPDATE {} SET notes = %s WHERE version = %s").format(
                                        sql.Identifier(SCHEMA_TABLE)
                                    ),
                                    (note, migration.version),
                                )
                        else:
                            conn.execute(
                                sql.SQL("INSERT INTO {} (version, name, notes) VALUES (%s, %s, %s)").format(
                                    sql.Identifier(SCHEMA_TABLE)
                                ),
                                (migration.version, migration.name, note),
                            )
                            report.applied.append(migration.label)
                except psycopg.Error as exc:
                    message = exc.diag.message_primary or str(exc)
                    if isinstance(exc, errors.InsufficientPrivilege):
                        message += (
                            " (run 'volunteer migrate' once as the owner of the existing tables or a superuser;"
                            " later runs need no ownership)"
                        )
                    raise MigrationError(f"migration {migration.label} failed: {message}") from exc
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
            finally:
                conn.autocommit = previous_autocommit
    return report


def applied_versions(target: ConnOrInfo) -> list[int]:
    """Versions recorded in ``volunteer_stream_schema`` (empty when it does not exist)."""
    with borrowed(target) as conn:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (SCHEMA_TABLE,)).fetchone()
        if not exists or not exists[0]:
            return []
        rows = conn.execute(sql.SQL("SELECT version FROM {} ORDER BY version").format(sql.Identifier(SCHEMA_TABLE)))
        return [int(r[0]) for r in rows.fetchall()]


def latest_version() -> int:
    return MIGRATIONS[-1].version
