"""``volunteer doctor`` against real services when something is wrong: each failure is one clear line
with a fix, dependent checks are not run, the exit status says so, and nothing is created on the way.
(The all-ok case on a running worker is in test_worker_observability.py.)"""

from __future__ import annotations

import socket
from typing import Any

import orjson
import pytest
from click.testing import CliRunner, Result

from pipeline.cli import main as cli
from pipeline.settings import Settings
from tests.integration.stream.harness import run
from tests.services.broker import TestNames, settings_for
from topics.clients import make_consumer

pytestmark = pytest.mark.integration


def env_of(settings: Settings) -> dict[str, str]:
    return {
        "VOLUNTEER_BROKER": settings.broker, "VOLUNTEER_DATABASE_URL": settings.database_url,
        "VOLUNTEER_TOPIC_TURNS": settings.topic_turns, "VOLUNTEER_TOPIC_VOLUNTEERED": settings.topic_volunteered,
        "VOLUNTEER_TOPIC_DLQ": settings.topic_dlq, "VOLUNTEER_TOPIC_PAGE_OPENS": settings.topic_page_opens,
        "VOLUNTEER_APP_ID": settings.app_id,
        # no hook settings or heartbeat of this machine in the channels check
        "HOME": "/nonexistent-home", "VOLUNTEER_HOOK_STATE_DIR": "/nonexistent-home/hooks",
    }


def doctor(settings: Settings, *args: str) -> Result:
    return CliRunner().invoke(cli, ["doctor", "--timeout", "5", *args], env=env_of(settings))


def checks_of(result: Result) -> dict[str, dict[str, Any]]:
    report = orjson.loads(result.output)
    assert report["ok"] is (result.exit_code == 0)
    return {c["check"]: c for c in report["checks"]}


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_wrong_broker_url_fails_with_a_fix_and_skips_what_needs_it(migrated_database_url: str,
                                                                   names: TestNames) -> None:
    settings = settings_for(f"kafka://127.0.0.1:{unused_port()}", names, database_url=migrated_database_url)
    result = doctor(settings)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0].startswith("fail  broker") and f"cannot reach {settings.broker}" in lines[0]
    assert lines[1].strip().startswith("fix: start it") and "VOLUNTEER_BROKER" in lines[1]
    assert any(line.startswith("warn  topics") and "not checked: broker unreachable" in line for line in lines)
    assert any(line.startswith("ok    database") for line in lines)
    assert any(line.startswith("ok    schema") and "(current)" in line for line in lines)
    # an empty brain and no events: a warning with its fix, but not a failure
    assert any(line.startswith("warn  brain") and "no live pages" in line for line in lines)
    assert "volunteer brain import" in result.output
    as_json = checks_of(doctor(settings, "--json"))
    assert as_json["broker"]["status"] == "fail" and as_json["broker"]["hint"]
    assert as_json["lag"]["status"] == "warn"


def test_missing_schema_fails_with_the_migrate_command(database_url: str, module_broker_url: str,
                                                       names: TestNames) -> None:
    settings = settings_for(module_broker_url, names, database_url=database_url,
                            topic_page_opens=names.topic("page-opens"))
    result = doctor(settings, "--json")
    assert result.exit_code == 1
    checks = checks_of(result)
    assert checks["database"]["status"] == "ok"
    assert checks["schema"]["status"] == "fail"
    assert checks["schema"]["detail"] == "not migrated (no volunteer_stream_schema table)"
    assert checks["schema"]["hint"].startswith("run: volunteer migrate --database-url")
    for name in ("brain", "channels", "feedback"):
        assert checks[name]["status"] == "warn" and "not checked" in checks[name]["detail"]
    # the broker answered, but no worker ever created this test's topics
    assert checks["broker"]["status"] == "ok"
    assert checks["topics"]["status"] == "fail"
    assert set(checks["topics"]["data"]["missing"]) == {settings.topic_turns, settings.topic_volunteered,
                                                        settings.topic_dlq, settings.topic_page_opens}
    assert "volunteer worker" in checks["topics"]["hint"]
    assert sorted(run(_topics(settings)) & set(checks["topics"]["data"]["missing"])) == []  # none created


def test_unreachable_database_fails_and_skips_the_rest(module_broker_url: str, names: TestNames) -> None:
    settings = settings_for(module_broker_url, names, database_url=f"postgresql://nobody@127.0.0.1:{unused_port()}/x")
    checks = checks_of(doctor(settings, "--json"))
    assert checks["database"]["status"] == "fail" and "VOLUNTEER_DATABASE_URL" in checks["database"]["hint"]
    assert [checks[n]["status"] for n in ("schema", "brain", "channels", "feedback")] == ["warn"] * 4


async def _topics(settings: Settings) -> set[str]:
    consumer = make_consumer(settings)
    await consumer.start()
    try:
        return set(await consumer.topics())
    finally:
        await consumer.stop()
