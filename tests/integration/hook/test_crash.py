"""A worker killed (SIGKILL) right after a hook printed and reported its pages: the worker that takes
over applies the delivery from the topic, so the printed page is stored exactly once and stays
deduped, while the page the hook did not print stays eligible."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pipeline.braindir import load_brain_dir
from pipeline.hook.block import output_length, payload_for
from pipeline.settings import Settings
from tests.integration.hook.conftest import SAMPLE_BRAIN, HookRunner, Worker, expected_items, wait_rows

pytestmark = pytest.mark.integration

ALICE, KITELINE = "people/alice-example", "companies/kiteline"


def test_delivery_survives_a_killed_worker(hook_settings: Settings, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude" / "projects").mkdir(parents=True)
    first = Worker(hook_settings, tmp_path / "w1.log", tmp_path / "d1").start()
    second: Worker | None = None
    try:
        first.wait_ready()
        hook = HookRunner(first.url, home, tmp_path / "state", secrets_dir=first.state_dir)
        prompt = "Did Alice Example reply about Kiteline?"
        pages = expected_items(load_brain_dir(SAMPLE_BRAIN), [("user", prompt)])  # two pointers
        assert [p["slug"] for p in pages] == [ALICE, KITELINE]
        alice_only = output_length(payload_for(pages[:1]) + "\n")  # the cap that drops Kiteline
        result = hook("crash-1", prompt, VOLUNTEER_HOOK_MAX_CHARS=str(alice_only))
        assert f"`{ALICE}`".encode() in result.stdout and KITELINE.encode() not in result.stdout
        assert hook.heartbeat()["pages_reported"] == 1
        assert first.proc is not None
        first.proc.send_signal(signal.SIGKILL)  # the delivery record may not even be processed yet
        first.proc.wait(30)

        second = Worker(hook_settings, tmp_path / "w2.log", tmp_path / "d2").start()
        second.wait_ready()
        hook.url = second.url
        again = hook("crash-1", "Kiteline and Alice Example, once more?")
        assert f"`{KITELINE}`".encode() in again.stdout and ALICE.encode() not in again.stdout
        rows = wait_rows(hook_settings.database_url, "crash-1", 2)
        assert [(turn, slug) for turn, slug, *_ in rows] == [(1, ALICE), (2, KITELINE)]
    finally:
        for worker in (second, first):
            if worker is not None:
                worker.stop()
