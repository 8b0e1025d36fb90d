"""The hook as users run it: installed by ``volunteer bootstrap`` into the real Claude Code and Codex
CLIs, which run offline against a stand-in model API that records every request.

Each test proves what reached the *model*: the volunteered block in the request (Claude Code: a text
part ``UserPromptSubmit hook additional context: …``; Codex: a ``developer`` message right after the
user's), only new items on the session's next prompt, rows in ``context_volunteer_events`` on the
harness channel matching exactly what the model saw, Codex's trust states (untrusted: skipped
silently; trusted: runs), and a hook with default settings that reaches the worker again after the
worker restarts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest

from pipeline.agents.answers import HOOK_ENDPOINT_MARK
from pipeline.hook.doctor import hook_channel_statuses
from pipeline.settings import Settings
from tests.integration.hook.conftest import ROOT, Worker, free_port, wait_rows
from tests.services.broker import new_names, settings_for
from tests.support.harness_cli import (
    HOOK_CONTEXT_PREFIX,
    StandInModel,
    base_env,
    developer_after_user,
    make_home,
    newest_hook_context,
    run_claude,
    run_codex,
    run_opencode,
)

pytestmark = pytest.mark.integration

ALICE, KITELINE = "people/alice-example", "companies/kiteline"
SLUG = re.compile(r"→ `([^`]+)`")
HOOK_ENV = {"VOLUNTEER_HOOK_DEADLINE_MS": "8000"}  # the 2 shared cores may be busy; deadlines have own tests


def share_credential(worker: Worker, home: Path) -> None:
    """Give the harness's user the worker's secret where a hook with default settings looks for it
    (a worker started by that user on that machine writes it there itself)."""
    assert worker.state_dir is not None
    target = home / ".local" / "state" / "volunteer"
    target.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = target / "hook-token"
    token.write_bytes((worker.state_dir / "hook-token").read_bytes())
    token.chmod(0o600)


def slugs(block: str) -> list[str]:
    return SLUG.findall(block)


def bootstrap(home: Path, *args: str, path: str = "/usr/bin:/bin") -> str:
    """``volunteer bootstrap`` as a user runs it, into this HOME, with a PATH that lacks .venv/bin."""
    env = base_env(home, {"PATH": path})
    done = subprocess.run([sys.executable, "-m", "pipeline", "bootstrap", *args], capture_output=True, text=True,
                          env=env, cwd=home, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def heartbeat(home: Path, channel: str) -> dict[str, object]:
    path = home / ".local" / "state" / "volunteer" / "hooks" / "heartbeat.json"
    if not path.exists():
        return {}
    data: dict[str, object] = orjson.loads(path.read_bytes())["channels"].get(channel, {})
    return data


def claude_blocks(model: StandInModel) -> list[str]:
    """The hook block of each model request's newest turn (``""`` when it had none)."""
    return ["\n".join(newest_hook_context(body)) for body in model.messages()]


def rows_match_what_the_model_saw(database_url: str, session_id: str, seen: list[str], channel: str) -> None:
    rows = wait_rows(database_url, session_id, len(set(seen)))
    assert rows, f"no events for {session_id}"
    assert {channel} == {r[2] for r in rows}
    assert sorted(r[1] for r in rows) == sorted(set(seen))  # delivered-only: exactly what was printed


# ----------------------------------------------------------------------------- Claude Code


def test_claude_code_block_reaches_the_model_and_resume_carries_only_new_items(
        claude_code_cli: Path, worker: Worker, hook_settings: Settings, tmp_path: Path) -> None:
    home = make_home(tmp_path)
    share_credential(worker, home)
    bootstrap(home, "--url", worker.url)
    with StandInModel() as model:
        first = run_claude(claude_code_cli, "Did Alice Example reply?", home=home, model_url=model.url,
                           env=HOOK_ENV)
        one = claude_blocks(model)[-1]
        assert ALICE in slugs(one) and KITELINE not in slugs(one)
        run_claude(claude_code_cli, "And Kiteline? Alice Example said yes.", home=home, model_url=model.url,
                   resume=first.session_id, env=HOOK_ENV)
        two = claude_blocks(model)[-1]
        assert KITELINE in slugs(two) and ALICE not in slugs(two)  # Alice was given already
        assert any(part.get("text", "").startswith(HOOK_CONTEXT_PREFIX + two)
                   for part in model.messages()[-1]["messages"][-1]["content"])  # a text part of its own
        assert len(model.messages()) == 2
    beat = heartbeat(home, "claude-code")
    assert beat["calls"] == 2 and beat["printed_calls"] == 2
    rows_match_what_the_model_saw(hook_settings.database_url, first.session_id, slugs(one) + slugs(two),
                                  "claude-code")


# ----------------------------------------------------------------------------- Codex


def test_codex_untrusted_is_skipped_silently_then_trusted_runs(
        codex_cli: Path, worker: Worker, hook_settings: Settings, tmp_path: Path) -> None:
    home = make_home(tmp_path)
    share_credential(worker, home)
    out = bootstrap(home, "--harness", "codex", "--url", worker.url)
    assert "untrusted" in out and "--trust" in out
    env = {"HOME": str(home), "CODEX_HOME": str(home / ".codex")}
    state = home / ".local" / "state" / "volunteer" / "hooks"
    with StandInModel() as model:
        skipped = run_codex(codex_cli, "Did Alice Example reply?", home=home, model_url=model.url, env=HOOK_ENV)
        assert developer_after_user(model.responses()[-1]) == []
        assert "volunteer" not in skipped.proc.stderr and heartbeat(home, "codex") == {}  # not a word, not a call
        (status,) = hook_channel_statuses({}, state_dir=state, env=env, project_dir=home)
        assert "not trusted" in status.detail and "--trust" in status.hint

        # trusted without a codex executable on PATH: key and hash computed here, as Codex computes them
        out = bootstrap(home, "--harness", "codex", "--url", worker.url, "--trust")
        assert "computed here" in out
        (status,) = hook_channel_statuses({}, state_dir=state, env=env, project_dir=home)
        assert "trusted" in status.detail and "never called" in status.detail and "new Codex session" in status.hint

        ran = run_codex(codex_cli, "Did Alice Example reply?", home=home, model_url=model.url, env=HOOK_ENV)
        (block,) = developer_after_user(model.responses()[-1])
        assert ALICE in slugs(block)
    assert heartbeat(home, "codex")["calls"] == 1
    rows_match_what_the_model_saw(hook_settings.database_url, ran.thread_id, slugs(block), "codex")


def test_codex_block_reaches_the_model_and_resume_carries_only_new_items(
        codex_cli: Path, worker: Worker, hook_settings: Settings, tmp_path: Path) -> None:
    home = make_home(tmp_path)
    share_credential(worker, home)
    out = bootstrap(home, "--harness", "codex", "--url", worker.url, "--trust", "--codex", str(codex_cli))
    assert "app-server" in out  # Codex itself wrote the trust entry
    with StandInModel() as model:
        first = run_codex(codex_cli, "Did Alice Example reply?", home=home, model_url=model.url, env=HOOK_ENV)
        (one,) = developer_after_user(model.responses()[-1])
        assert ALICE in slugs(one) and KITELINE not in slugs(one)
        run_codex(codex_cli, "And Kiteline? Alice Example said yes.", home=home, model_url=model.url,
                  resume=first.thread_id, env=HOOK_ENV)
        (two,) = developer_after_user(model.responses()[-1])
        assert KITELINE in slugs(two) and ALICE not in slugs(two)
    beat = heartbeat(home, "codex")
    assert beat["calls"] == 2 and beat["printed_calls"] == 2
    rows_match_what_the_model_saw(hook_settings.database_url, first.thread_id, slugs(one) + slugs(two), "codex")


# ----------------------------------------------------------------------------- opencode


def opencode_block(model: StandInModel, prompt: str) -> str:
    """The synthetic text part the plugin added after ``prompt`` in the newest request that holds it."""
    for body in reversed(model.messages()):
        users = [m for m in body["messages"] if m.get("role") == "user"]
        if not users:
            continue
        parts = users[-1]["content"] if isinstance(users[-1]["content"], list) else []
        texts = [p.get("text", "") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        if any(prompt in t for t in texts):
            return "\n".join(t for t in texts if prompt not in t)
    raise AssertionError(f"no model request carries {prompt!r}")


def test_opencode_plugin_block_reaches_the_model_and_the_next_prompt_carries_only_new_items(
        opencode_cli: Path, worker: Worker, hook_settings: Settings, tmp_path: Path) -> None:
    home = make_home(tmp_path)
    share_credential(worker, home)
    out = bootstrap(home, "--harness", "opencode", "--url", worker.url)
    assert "volunteer-stream.js" in out
    with StandInModel() as model:
        first = run_opencode(opencode_cli, "Did Alice Example reply?", home=home, model_url=model.url, env=HOOK_ENV)
        one = opencode_block(model, "Did Alice Example reply?")
        assert ALICE in slugs(one) and KITELINE not in slugs(one)
        run_opencode(opencode_cli, "And Kiteline? Alice Example said yes.", home=home, model_url=model.url,
                     session=first.session_id, env=HOOK_ENV)
        two = opencode_block(model, "And Kiteline? Alice Example said yes.")
        assert KITELINE in slugs(two) and ALICE not in slugs(two)
    beat = heartbeat(home, "opencode")
    assert beat["calls"] == 2 and beat["printed_calls"] == 2
    rows_match_what_the_model_saw(hook_settings.database_url, first.session_id, slugs(one) + slugs(two), "opencode")


# ----------------------------------------------------------------------------- worker restart


@dataclass
class SameHostWorker(Worker):
    """A worker on a fixed web port that shares the user's HOME and runtime folder with the harness,
    as a worker started by that user on that machine does."""

    port: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.extra_env}

    def wait_ready(self, count: int = 1, timeout: float = 90) -> None:
        super().wait_ready(count, timeout)
        deadline = time.monotonic() + timeout
        while self.log().count(HOOK_ENDPOINT_MARK) < count:  # this start's endpoint line may come after ready
            assert time.monotonic() < deadline, self.log()[-3000:]
            time.sleep(0.05)
        self.url = re.findall(re.escape(HOOK_ENDPOINT_MARK) + r" (http://[^/\s]+)/", self.log())[-1]

    def start(self) -> SameHostWorker:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "pipeline", "worker", "--brain", str(ROOT / "pipeline" / "samples" / "brain"),
                 "--web-port", str(self.port)], env=self.env(), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        return self


@pytest.fixture
def own_settings(module_broker_url: str, hook_database: str) -> Settings:
    # The default app id: a hook with default settings looks for the default stack's workers.
    return settings_for(module_broker_url, new_names(), database_url=hook_database, topic_partitions=4,
                        app_id="volunteer-stream")


@pytest.fixture
def restartable(own_settings: Settings, tmp_path: Path) -> Iterator[tuple[SameHostWorker, Path]]:
    home = make_home(tmp_path)
    (home / "run").mkdir(mode=0o700)
    w = SameHostWorker(own_settings, tmp_path / "worker.log", tmp_path / "data", port=free_port(),
                       extra_env={"HOME": str(home), "XDG_RUNTIME_DIR": str(home / "run"),
                                  "XDG_STATE_HOME": str(home / ".local" / "state")},
                       default_state=True)  # the credential and the registry under that HOME, like the hook's
    try:
        yield w, home
    finally:
        w.stop()


def test_a_hook_with_default_settings_reaches_the_worker_again_after_a_restart(
        claude_code_cli: Path, restartable: tuple[SameHostWorker, Path], own_settings: Settings) -> None:
    """Requirement (issue 11, item 2): the hook finds the worker with default settings, also when the
    worker restarts right after serving prompts (its port's connections still in TIME_WAIT)."""
    worker, home = restartable
    bootstrap(home)  # default settings: no --url
    env = {**HOOK_ENV, "XDG_RUNTIME_DIR": str(home / "run")}
    worker.start().wait_ready()
    with StandInModel() as model:
        first = run_claude(claude_code_cli, "Did Alice Example reply?", home=home, model_url=model.url, env=env)
        assert ALICE in slugs(claude_blocks(model)[-1]), f"no block before the restart: {heartbeat(home, 'claude-code')}"
        worker.stop()
        worker.start().wait_ready(count=2)
        restarted = time.monotonic()
        run_claude(claude_code_cli, "And Kiteline?", home=home, model_url=model.url, resume=first.session_id, env=env)
        block = claude_blocks(model)[-1]
        assert KITELINE in slugs(block), f"no block after the restart: {heartbeat(home, 'claude-code')}"
        assert time.monotonic() - restarted < 30
    assert worker.url.endswith(f":{worker.port}"), f"the restarted worker moved to {worker.url}"
    assert os.path.isdir(home / "run")


def test_a_hook_pinned_to_the_worker_port_reaches_it_again_after_a_restart(
        claude_code_cli: Path, restartable: tuple[SameHostWorker, Path], own_settings: Settings) -> None:
    """Requirement (issue 11, item 2): the configured web port survives a restart right after serving
    prompts (connections in TIME_WAIT must not move it), so a hook pointed at it keeps working."""
    worker, home = restartable
    bootstrap(home, "--url", f"http://127.0.0.1:{worker.port}")
    worker.start().wait_ready()
    with StandInModel() as model:
        first = run_claude(claude_code_cli, "Did Alice Example reply?", home=home, model_url=model.url, env=HOOK_ENV)
        assert ALICE in slugs(claude_blocks(model)[-1]), heartbeat(home, "claude-code")
        worker.stop()
        worker.start().wait_ready(count=2)
        assert worker.url == f"http://127.0.0.1:{worker.port}", f"the restarted worker moved to {worker.url}"
        run_claude(claude_code_cli, "And Kiteline?", home=home, model_url=model.url, resume=first.session_id,
                   env=HOOK_ENV)
        assert KITELINE in slugs(claude_blocks(model)[-1]), heartbeat(home, "claude-code")
