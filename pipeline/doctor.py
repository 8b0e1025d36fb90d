"""``volunteer doctor``'s checks: is every piece of a deployment there and healthy, and if not, what to do.

Each check gives one :class:`Check`: ``ok``, ``warn`` or ``fail``, a one-line detail, and for warn and
fail a one-line fix. Checks run in dependency order; when the broker or the database cannot be
reached, the checks that need it are reported as ``warn ... not checked`` so the real failure stands
out. Nothing here writes anything or creates topics: topics are listed, never described by name
(asking an auto-creating broker, such as Tansu, about a missing topic would create it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer, TopicPartition

from pipeline.masking import mask
from pipeline.settings import Settings
from sinks.db import redact
from topics import tansu_client
from topics.clients import make_admin, make_consumer
from topics.definitions import topic_specs

OK, WARN, FAIL = "ok", "warn", "fail"
CHANNEL_DAYS = 7
DEFAULT_MAX_LAG = 1000
DEFAULT_TIMEOUT_S = 10.0


@dataclass
class Check:
    name: str
    status: str
    detail: str
    hint: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # details quote libpq and broker errors, which can echo a password back
        self.detail, self.hint = mask(self.detail), mask(self.hint)

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "status": self.status, "detail": self.detail, "hint": self.hint,
                "data": self.data}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return " ".join(text.splitlines()[:1]) if text else type(exc).__name__


def _not_checked(name: str, why: str) -> Check:
    return Check(name, WARN, f"not checked: {why}", f"fix the {why.split()[0]} first")


# ----------------------------------------------------------------------------- broker side


async def _broker_checks(settings: Settings, group: str, max_lag: int, timeout: float) -> list[Check]:
    where = settings.broker
    kind = "embedded Tansu" if settings.broker_is_embedded else "Kafka"
    consumer = make_consumer(settings, enable_auto_commit=False, request_timeout_ms=int(timeout * 1000))
    try:
        await asyncio.wait_for(consumer.start(), timeout)
        names = set(await asyncio.wait_for(consumer.topics(), timeout))
    except Exception as exc:
        await _quietly(consumer.stop())
        why = _first_line(exc) if str(exc).strip() else "timed out"
        if type(exc).__name__ == "KafkaConnectionError":
            why = "nothing answers there (connection refused or timed out)"
        fix = "start it ('volunteer up' for the embedded one) or correct --broker / VOLUNTEER_BROKER"
        return [Check("broker", FAIL, f"cannot reach {where}: {why}", fix),
                _not_checked("topics", "broker unreachable"), _not_checked("lag", "broker unreachable")]
    checks: list[Check] = []
    try:
        brokers = len(tansu_client.consumer_client(consumer).cluster.brokers())
        checks.append(Check("broker", OK, f"{where} ({kind}): {brokers} broker{'s' if brokers != 1 else ''}",
                            data={"url": where, "brokers": brokers, "embedded": settings.broker_is_embedded}))
        specs = topic_specs(settings).all()
        counts = {s.name: len(consumer.partitions_for_topic(s.name) or ()) for s in specs if s.name in names}
        checks.append(_topics_check(settings, [s.name for s in specs], counts))
        checks.append(await _lag_check(settings, group, max_lag, timeout, consumer, counts))
    finally:
        await _quietly(consumer.stop())
    return checks


async def _quietly(awaitable: Any) -> None:
    try:
        await asyncio.wait_for(awaitable, 5)
    except Exception:
        return


def _topics_check(settings: Settings, wanted: list[str], counts: dict[str, int]) -> Check:
    missing = [n for n in wanted if n not in counts]
    detail = ", ".join(f"{n} {counts[n]}" for n in wanted if n in counts)
    data = {"partitions": counts, "missing": missing}
    if missing:
        return Check("topics", FAIL, f"missing: {', '.join(missing)}" + (f" (present: {detail})" if detail else ""),
                     "start 'volunteer worker' once (it creates them with VOLUNTEER_TOPIC_PARTITIONS) or create "
                     "them like compose/create-topics.sh", data)
    if counts[settings.topic_turns] != counts[settings.topic_volunteered]:
        return Check("topics", WARN, f"{detail} partitions: turns and volunteered differ", "give both topics the "
                     "same partition count (docs/deployment.md, 'Scaling out')", data)
    return Check("topics", OK, f"{detail} partitions", data=data)


async def _lag_check(settings: Settings, group: str, max_lag: int, timeout: float, consumer: AIOKafkaConsumer,
                     counts: dict[str, int]) -> Check:
    inputs = [t for t in (settings.topic_turns, settings.topic_volunteered, settings.topic_page_opens) if t in counts]
    tps = [TopicPartition(t, p) for t in inputs for p in range(counts[t])]
    if not tps:
        return _not_checked("lag", "topics missing")
    admin = make_admin(settings)
    try:
        await asyncio.wait_for(admin.start(), timeout)
        committed = await asyncio.wait_for(tansu_client.committed_offsets(admin, group, tps), timeout)
        members, state = await _group_members(admin, group, timeout)
        ends = await asyncio.wait_for(tansu_client.end_offsets(consumer, tps, settings.broker_is_embedded), timeout)
        never = [tp for tp in tps if committed.get(tp, -1) < 0]
        starts = await asyncio.wait_for(consumer.beginning_offsets(never), timeout) if never else {}
    except Exception as exc:
        return Check("lag", WARN, f"cannot read the offsets of group {group}: {_first_line(exc)}",
                     "check that the broker supports the admin API and the client may read group offsets")
    finally:
        await _quietly(admin.close())
    per_topic: dict[str, int] = dict.fromkeys(inputs, 0)
    for tp in tps:
        done = committed.get(tp, -1)
        start = done if done >= 0 else int(starts.get(tp, 0))
        per_topic[tp.topic] += max(0, int(ends[tp]) - start)
    total = sum(per_topic.values())
    parts = ", ".join(f"{t} {n}" for t, n in per_topic.items())
    who = f"group {group}" + (f" ({state}, {members} member{'s' if members != 1 else ''})" if state else "")
    data = {"group": group, "lag": per_topic, "total": total, "members": members, "state": state,
            "partitions": len(tps)}
    detail = f"{who}: lag {total} ({parts}) over {len(tps)} partitions"
    if len(never) == len(tps) and any(ends[tp] > 0 for tp in tps):
        return Check("lag", WARN, f"{who} has committed nothing yet; {total} records waiting ({parts})",
                     f"start 'volunteer worker' with --app-id {group} (or set --app-id to your workers' group)",
                     data)
    if total > max_lag:
        return Check("lag", WARN, detail + f", over {max_lag}", "add workers (up to the partition count), or see "
                     "docs/operations.md 'Lag keeps growing'", data)
    if state and members == 0 and total > 0:
        return Check("lag", WARN, detail + "; no worker is running", f"start 'volunteer worker' --app-id {group}",
                     data)
    return Check("lag", OK, detail, data=data)


async def _group_members(admin: Any, group: str, timeout: float) -> tuple[int, str]:
    """Members and state of the group, or ``(0, "")`` when the broker will not say."""
    try:
        (response,) = await asyncio.wait_for(admin.describe_consumer_groups([group]), timeout)
        entry = response.groups[0]
        return len(entry[5]), str(entry[2])
    except Exception:
        return 0, ""


# ----------------------------------------------------------------------------- database side


def _database_checks(settings: Settings, timeout: float) -> list[Check]:
    from sinks.schema import applied_versions, latest_version

    url = redact(settings.database_url)
    try:
        conn = psycopg.connect(settings.database_url, autocommit=True, connect_timeout=max(1, round(timeout)))
    except psycopg.Error as exc:
        return [Check("database", FAIL, f"cannot reach {url}: {_first_line(exc)}",
                      "start PostgreSQL ('volunteer up' for the embedded one) or correct --database-url / "
                      "VOLUNTEER_DATABASE_URL"),
                _not_checked("schema", "database unreachable"), _not_checked("brain", "database unreachable"),
                _hooks_only("database unreachable"), _not_checked("feedback", "database unreachable")]
    with conn:
        conn.execute("SELECT set_config('statement_timeout', %s, false)", (str(int(timeout * 1000)),))
        version = str(conn.execute("SHOW server_version").fetchone()[0]).split()[0]  # type: ignore[index]
        checks = [Check("database", OK, f"{url} answers (PostgreSQL {version})", data={"server_version": version})]
        applied = applied_versions(conn)
        latest = latest_version()
        missing = sorted(set(range(1, latest + 1)) - set(applied))
        fix = f"run: volunteer migrate --database-url '{url}'"
        if not applied:
            checks.append(Check("schema", FAIL, "not migrated (no volunteer_stream_schema table)", fix,
                                {"applied": [], "latest": latest}))
            return [*checks, _not_checked("brain", "schema missing"), _hooks_only("schema missing"),
                    _not_checked("feedback", "schema missing")]
        data = {"applied": applied, "latest": latest}
        if missing:
            checks.append(Check("schema", FAIL, f"version {max(applied)}, missing {', '.join(map(str, missing))} "
                                f"(latest {latest})", fix, data))
        elif max(applied) > latest:
            checks.append(Check("schema", WARN, f"version {max(applied)} is newer than this program's {latest}",
                                "upgrade this installation of volunteer-stream", data))
        else:
            checks.append(Check("schema", OK, f"version {latest} (current)", data=data))
        checks.append(_brain_check(conn))
        checks.extend(_activity_checks(conn))
    return checks


BRAIN_SQL = """
SELECT coalesce(p.source_id, a.source_id), coalesce(p.pages, 0), coalesce(a.aliases, 0)
  FROM (SELECT source_id, count(*) AS pages FROM pages WHERE deleted_at IS NULL GROUP BY source_id) p
  FULL JOIN (SELECT source_id, count(*) AS aliases FROM page_aliases GROUP BY source_id) a
    ON a.source_id = p.source_id
 ORDER BY 1
"""


def _brain_check(conn: psycopg.Connection) -> Check:
    try:
        rows = [(str(s), int(p), int(a)) for s, p, a in conn.execute(BRAIN_SQL).fetchall()]
    except psycopg.Error as exc:
        return Check("brain", FAIL, f"cannot read pages / page_aliases: {_first_line(exc)}",
                     "run 'volunteer migrate', and check the role may read both tables")
    pages = sum(r[1] for r in rows)
    aliases = sum(r[2] for r in rows)
    data = {"sources": {s: {"pages": p, "aliases": a} for s, p, a in rows}, "pages": pages, "aliases": aliases}
    if pages == 0:
        return Check("brain", WARN, "no live pages: nothing can be volunteered",
                     "import a brain: volunteer brain import DIR (a brain directory or a folder of Markdown pages)",
                     data)
    shown = ", ".join(f"{s} {p} pages / {a} aliases" for s, p, a in rows[:5])
    more = f", and {len(rows) - 5} more sources" if len(rows) > 5 else ""
    return Check("brain", OK, f"{pages} live pages, {aliases} alias rows: {shown}{more}", data=data)


def _hooks_only(why: str) -> Check:
    """The channels check without the events table: the hooks' settings and heartbeat alone.

    A hook that gets nothing says why in its heartbeat (``no_worker``, ``deadline``, Codex trust...),
    which matters most exactly when the database or the broker is down.
    """
    from pipeline.hook.channel_health import merge_into_channels

    base = _not_checked("channels", why)
    status, detail, hint, data = merge_into_channels(base.status, f"events not checked ({why})", "", {}, None,
                                                     days=CHANNEL_DAYS)
    if not data:
        return base
    return Check("channels", status, detail, hint or base.hint, data)


def _utc(at: datetime | None) -> str | None:
    if at is None:
        return None
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _activity_checks(conn: psycopg.Connection) -> list[Check]:
    from sinks.stats import channel_activity

    try:
        activity = channel_activity(conn, CHANNEL_DAYS)
    except psycopg.Error as exc:  # informational, like the reference
        return [Check("channels", OK, f"query failed (informational): {_first_line(exc)}"),
                _not_checked("feedback", "channels query")]
    if activity is None:
        return [Check("channels", OK, "context_volunteer_events is missing (see schema)"),
                _not_checked("feedback", "events table")]
    channels = {a.channel: {"count": a.count, "last_fired": _utc(a.last_fired)} for a in activity}
    events = sum(a.count for a in activity)
    if activity:
        shown = ", ".join(f"{a.channel}={a.count} (last {channels[a.channel]['last_fired']})" for a in activity)
        channel_check = Check("channels", OK, f"active in {CHANNEL_DAYS} days: {shown}",
                              data={"window_days": CHANNEL_DAYS, "channels": channels})
    else:
        channel_check = Check("channels", OK, f"no volunteer events in {CHANNEL_DAYS} days",
                              data={"window_days": CHANNEL_DAYS, "channels": {}})
    from pipeline.hook.channel_health import (
        merge_into_channels,  # hook channels: installed, called, delivering
    )

    channel_check = Check("channels", *merge_into_channels(
        channel_check.status, channel_check.detail, channel_check.hint, channel_check.data,
        {a.channel: a.count for a in activity}, days=CHANNEL_DAYS))
    row = conn.execute("SELECT count(*) FROM pages WHERE deleted_at IS NULL AND last_retrieved_at > now() - "
                       "make_interval(days => %s)", (CHANNEL_DAYS,)).fetchone()
    opened = int(row[0]) if row else 0
    data = {"pages_opened": opened, "events": events, "window_days": CHANNEL_DAYS}
    if events and not opened:
        feedback = Check("feedback", WARN, f"{events} events but no page opened in {CHANNEL_DAYS} days: precision "
                         "in 'volunteer stats' reads 0", "publish page opens from your app (topic page-opens) or "
                         "with 'volunteer opened SLUG'; see docs/observability.md", data)
    else:
        feedback = Check("feedback", OK, f"{opened} page{'s' if opened != 1 else ''} opened in {CHANNEL_DAYS} days",
                         data=data)
    return [channel_check, feedback]


# ----------------------------------------------------------------------------- all of it


def run_checks(settings: Settings, *, group: str | None = None, max_lag: int = DEFAULT_MAX_LAG,
               timeout: float = DEFAULT_TIMEOUT_S) -> list[Check]:
    """Every check, broker side then database side; never raises for an unhealthy deployment."""
    group_id = group or settings.app_id
    kafka_log = logging.getLogger("aiokafka")
    level = kafka_log.level
    kafka_log.setLevel(logging.CRITICAL)  # its connection warnings would repeat what the checks say
    try:
        broker = asyncio.run(asyncio.wait_for(_broker_checks(settings, group_id, max_lag, timeout), timeout * 4))
    except TimeoutError:
        broker = [Check("broker", FAIL, f"no answer from {settings.broker} within {timeout * 4:.0f}s",
                        "check the broker and the network, or raise --timeout"),
                  _not_checked("topics", "broker unreachable"), _not_checked("lag", "broker unreachable")]
    finally:
        kafka_log.setLevel(level)
    return broker + _database_checks(settings, timeout) + [_core_check()]


def _core_check() -> Check:
    """Informational: which build of the decision core this process runs (both give the same results)."""
    from pipeline.corebuild import core_build

    build = core_build()
    return Check("core", OK, f"decision core: {build}", data={"compiled": build.startswith("compiled")})


def failed(checks: Sequence[Check]) -> bool:
    return any(c.status == FAIL for c in checks)
