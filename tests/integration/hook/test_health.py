"""The probes on a real worker's web server: ``/livez`` answers, ``/readyz`` says ready only when the
worker owns partitions, has recovered, is caught up and has its brain, and neither leaks names."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipeline.agents.health import LIVE_PATH, READY_PATH
from pipeline.settings import Settings
from tests.integration.hook.conftest import Worker

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, dict[str, Any], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            raw = response.read()
            return response.status, orjson.loads(raw), raw
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, orjson.loads(raw), raw


def test_live_and_ready_on_a_running_worker(worker: Worker, hook_settings: Settings) -> None:
    status, body, _ = get(worker.url + LIVE_PATH)
    assert (status, body) == (200, {"status": "ok"})
    status, body, raw = get(worker.url + READY_PATH)
    assert status == 200, body
    assert body["status"] == "ready"
    assert body["checks"] == {"partitions": True, "recovered": True, "caught_up": True, "broker": True, "brain": True}
    assert 0 <= body["broker_silence_s"] <= 5
    assert body["partitions"] == hook_settings.topic_partitions and body["brain_pages"] > 0
    # nothing that names the deployment: no topic, group, database or URL
    for secret in (hook_settings.topic_turns, hook_settings.app_id, hook_settings.database_url.split("@")[-1],
                   "postgresql", "tansu"):
        assert secret.encode() not in raw


def test_ready_is_503_on_a_worker_that_owns_no_partition(module_broker_url: str, hook_database: str,
                                                          tmp_path: Path) -> None:
    """Two workers on one-partition topics: one owns it (200), the other owns nothing and answers 503
    naming the failed check; both stay alive (/livez 200)."""
    from tests.services.broker import new_names, settings_for

    settings = settings_for(module_broker_url, new_names(), database_url=hook_database, topic_partitions=1)
    pair = [Worker(settings, tmp_path / f"w{i}.log", tmp_path / f"data{i}") for i in range(2)]
    try:
        for w in pair:
            w.start()
        for w in pair:
            w.wait_ready()
        deadline = time.monotonic() + 60
        while True:  # until the group has settled: one owner, one idle
            answers = [get(w.url + READY_PATH) for w in pair]
            if sorted(a[0] for a in answers) == [200, 503] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert sorted(a[0] for a in answers) == [200, 503], answers
        idle = next(b for s, b, _ in answers if s == 503)
        assert idle["status"] == "not_ready" and idle["checks"]["partitions"] is False and idle["partitions"] == 0
        assert [get(w.url + LIVE_PATH)[0] for w in pair] == [200, 200]
    finally:
        for w in pair:
            w.stop()


def test_probes_need_no_credential_but_keep_the_edge_checks(worker: Worker) -> None:
    """Unsigned GETs of the probes are answered; a web page (Origin) and a POST are refused; an
    unsigned request to a hook path still is (401)."""
    def status(path: str, method: str = "GET", **headers: str) -> int:
        request = urllib.request.Request(worker.url + path, method=method, headers=headers,
                                         data=b"{}" if method == "POST" else None)
        if method == "POST":
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)

    assert status(LIVE_PATH) == 200
    assert status(READY_PATH, Origin="http://evil.example") == 403
    assert status(LIVE_PATH, "POST") == 405
    assert status("/volunteer/hook/health") == 401
