"""The worker registry as the hook reads it: which entries are live, and which stack they belong to
(real files in a temporary directory; the integration side is tests/integration/hook/test_discovery.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.hook import registry


def write_entry(base: Path, broker: str, app_id: str, url: str, pid: int | None = None) -> Path:
    pid = os.getpid() if pid is None else pid
    path = Path(registry.entry_path(str(base), broker, app_id, pid))
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_bytes(registry.entry_body(broker, app_id, url, pid))
    path.chmod(0o600)
    return path


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_the_stack_is_chosen_by_app_id_and_broker(tmp_path: Path) -> None:
    write_entry(tmp_path, "tansu://127.0.0.1:1", "volunteer-stream", "http://127.0.0.1:11")
    write_entry(tmp_path, "tansu://127.0.0.1:2", "other", "http://127.0.0.1:22")
    assert registry.urls_for(str(tmp_path), {}) == ["http://127.0.0.1:11"]
    assert registry.urls_for(str(tmp_path), {"VOLUNTEER_APP_ID": "other"}) == ["http://127.0.0.1:22"]
    assert registry.urls_for(str(tmp_path), {"VOLUNTEER_BROKER": "TANSU://127.0.0.1:1/"}) == ["http://127.0.0.1:11"]
    assert registry.urls_for(str(tmp_path), {"VOLUNTEER_BROKER": "tansu://127.0.0.1:2"}) == []


def test_two_brokers_with_one_app_id_are_ambiguous_unless_the_hook_names_one(tmp_path: Path) -> None:
    write_entry(tmp_path, "tansu://127.0.0.1:1", "volunteer-stream", "http://127.0.0.1:11")
    write_entry(tmp_path, "tansu://127.0.0.1:2", "volunteer-stream", "http://127.0.0.1:22", pid=1)
    with pytest.raises(registry.Ambiguous):
        registry.urls_for(str(tmp_path), {})
    assert registry.urls_for(str(tmp_path), {"VOLUNTEER_BROKER": "tansu://127.0.0.1:2"}) == ["http://127.0.0.1:22"]


def test_stale_and_foreign_entries_are_ignored(tmp_path: Path) -> None:
    gone = write_entry(tmp_path, "kafka://b:9092", "volunteer-stream", "http://127.0.0.1:1", pid=dead_pid())
    assert registry.urls_for(str(tmp_path), {}) == []  # its process is gone
    gone.unlink()
    old = write_entry(tmp_path, "kafka://b:9092", "volunteer-stream", "http://127.0.0.1:2")
    past = time.time() - registry.STALE_S - 5
    os.utime(old, (past, past))
    assert registry.urls_for(str(tmp_path), {}) == []  # not touched for too long
    os.utime(old)
    assert registry.urls_for(str(tmp_path), {}) == ["http://127.0.0.1:2"]
    old.chmod(0o666)
    assert registry.urls_for(str(tmp_path), {}) == []  # writable by others: not trusted
    old.chmod(0o600)
    (tmp_path / registry.REGISTRY_DIR).chmod(0o777)
    assert registry.urls_for(str(tmp_path), {}) == []  # a directory others can write to: not trusted


def test_an_entry_renamed_to_another_stack_is_ignored(tmp_path: Path) -> None:
    path = write_entry(tmp_path, "kafka://b:9092", "other", "http://127.0.0.1:3")
    key = registry.stack_key("kafka://b:9092", "volunteer-stream")
    path.rename(path.with_name(f"{key}.{os.getpid()}.json"))
    assert registry.urls_for(str(tmp_path), {}) == []
