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

import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from pipeline.hook.channel_health import hook_channel_statuses
from pipeline.hook.install import LAUNCHER, installed_command
from pipeline.settings import Settings
from tests.integration.harness.conftest import HOOK_TOKEN, SameHostWorker
from tests.integration.hook.conftest import Worker, free_port, wait_rows
from tests.services.broker import new_names, settings_for
from tests.support.harness_cli import (
    HOOK_CONTEXT_PREFIX,
    StandInModel,
    base_env,
    developer_after_user,
    make_home,
    newest_hook_context,
    responses_items,
    run_claude,
    run_codex,
    run_opencode,
)

pytestmark = pytest.mark.integration

ALICE, KITELINE = "people/alice-example", "companies/kiteline"
SLUG = re.compile(r"→ `([^`]+)`")
SLOW_CORES = {"VOLUNTEER_HOOK_DEADLINE_MS": "8000"}  # the 2 shared cores may be busy; deadlines have own tests
HOOK_ENV = {**SLOW_CORES, "VOLUNTEER_HOOK_TOKEN": HOOK_TOKEN}  # the module worker's secret, where one is used


def slugs(block: str) -> list[str]:
    return SLUG.findall(block)


def bare_path(home: Path) -> str:
    """A PATH with node, sh and env only: no .venv/bin, no volunteer, no codex (Codex's launcher is a
    node script, so 'codex app-server' through an explicit --codex still starts)."""
    bin_dir = home / "bare-bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for tool in ("node", "sh", "env"):
            found = shutil.which(tool)
            assert found, f"{tool} is not on PATH"
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def bootstrap(home: Path, *args: str) -> str:
    """``volunteer bootstrap`` as a user runs it, into this HOME, with a PATH that lacks .venv/bin."""
    env = base_env(home, {"PATH": bare_path(home)})
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
    bootstrap(home, "--url", worker.url)
    # this installation's interpreter and launcher, by absolute path: no PATH, no site-packages scan
    assert installed_command(home / ".claude" / "settings.json") == (
        f"env VOLUNTEER_HOOK_URL={worker.url} {sys.executable} -I -S {LAUNCHER} hook user-prompt")
    with StandInModel() as model:
        first = run_claude(claude_code_cli, "Did Alice Example reply?", home=home, model_url=model.url,
                           env=HOOK_ENV)
        one = claude_blocks(model)[-1]
        assert ALICE in slugs(one) and KITELINE not in slugs(one)
        again = run_claude(claude_code_cli, "And Kiteline? Alice Example said yes.", home=home, model_url=model.url,
                           resume=first.session_id, env=HOOK_ENV)
        assert again.session_id == first.session_id
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
    out = bootstrap(home, "--harness", "codex", "--url", worker.url, "--trust", "--codex", str(codex_cli))
    assert "app-server" in out  # Codex itself wrote the trust entry
    with StandInModel() as model:
        first = run_codex(codex_cli, "Did Alice Example reply?", home=home, model_url=model.url, env=HOOK_ENV)
        (one,) = developer_after_user(model.responses()[-1])
        assert ALICE in slugs(one) and KITELINE not in slugs(one)
        again = run_codex(codex_cli, "And Kiteline? Alice Example said yes.", home=home, model_url=model.url,
                          resume=first.thread_id, env=HOOK_ENV)
        assert again.thread_id == first.thread_id
        items = responses_items(model.responses()[-1])
        assert ("user", "Did Alice Example reply?") in items  # the same session, resumed
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


def restartable(settings: Settings, tmp_path: Path) -> Iterator[tuple[SameHostWorker, Path]]:
    """A worker on a fixed port, run by the same user (HOME) as the harness, with that user's
    default state folder: the credential and whatever the hook uses to find workers are shared
    the way they are on a developer's machine."""
    home = make_home(tmp_path)
    (home / "run").mkdir(mode=0o700)
    w = SameHostWorker(settings, tmp_path / "worker.log", tmp_path / "data", port=free_port(), default_state=True,
                       extra_env={"HOME": str(home), "XDG_RUNTIME_DIR": str(home / "run"),
                                  "XDG_STATE_HOME": str(home / ".local" / "state")})
    try:
        yield w, home
    finally:
        w.stop()


@pytest.fixture
def default_stack(module_broker_url: str, hook_database: str, tmp_path: Path) -> Iterator[tuple[SameHostWorker, Path]]:
    """The default stack: app id ``volunteer-stream``, what a hook with default settings looks for."""
    settings = settings_for(module_broker_url, new_names(), database_url=hook_database, app_id="volunteer-stream")
    yield from restartable(settings, tmp_path)


@pytest.fixture
def own_stack(module_broker_url: str, hook_database: str, tmp_path: Path) -> Iterator[tuple[SameHostWorker, Path]]:
    yield from restartable(settings_for(module_broker_url, new_names(), database_url=hook_database), tmp_path)


def test_a_hook_with_default_settings_reaches_the_worker_again_after_a_restart(
        claude_code_cli: Path, default_stack: tuple[SameHostWorker, Path]) -> None:
    """Requirement (issue 11, item 2): the hook finds the worker with default settings, also when the
    worker restarts right after serving prompts (its port's connections still in TIME_WAIT)."""
    worker, home = default_stack
    bootstrap(home)  # default settings: no --url
    env = {**SLOW_CORES, "XDG_RUNTIME_DIR": str(home / "run")}
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


def test_a_hook_pinned_to_the_worker_port_reaches_it_again_after_a_restart(
        claude_code_cli: Path, own_stack: tuple[SameHostWorker, Path]) -> None:
    """Requirement (issue 11, item 2): the configured web port survives a restart right after serving
    prompts (connections in TIME_WAIT must not move it), so a hook pointed at it keeps working."""
    worker, home = own_stack
    bootstrap(home, "--url", f"http://127.0.0.1:{worker.port}")
    worker.start().wait_ready()
    with StandInModel() as model:
        first = run_claude(claude_code_cli, "Did Alice Example reply?", home=home, model_url=model.url,
                           env=SLOW_CORES)
        assert ALICE in slugs(claude_blocks(model)[-1]), heartbeat(home, "claude-code")
        worker.stop()
        worker.start().wait_ready(count=2)
        assert worker.url == f"http://127.0.0.1:{worker.port}", f"the restarted worker moved to {worker.url}"
        run_claude(claude_code_cli, "And Kiteline?", home=home, model_url=model.url, resume=first.session_id,
                   env=SLOW_CORES)
        assert KITELINE in slugs(claude_blocks(model)[-1]), heartbeat(home, "claude-code")
