"""``volunteer bootstrap`` on sample settings files: install, idempotence, other settings untouched,
uninstall, dry-run diff, refusals, for Claude Code and Codex."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pipeline.cli.bootstrap_cmd import bootstrap
from pipeline.hook.install import (
    InstallError,
    hook_command,
    install_into,
    installed_command,
    is_our_command,
    plan,
    settings_path,
    uninstall_from,
)

SAMPLE: dict[str, Any] = {
    "permissions": {"allow": ["Bash(ls:*)"], "deny": []},
    "hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "~/bin/lint-prompt", "timeout": 3}]}],
        "Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "notify-send done"}]}],
    },
    "env": {"FOO": "1"},
    "model": "opus",
}
COMMAND = "/opt/venv/bin/volunteer hook user-prompt"


def run(home: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(bootstrap, ["--executable", "/opt/venv/bin/volunteer", *args],
                                env={"HOME": str(home), "CLAUDE_CONFIG_DIR": "", "CODEX_HOME": ""})
    return result.exit_code, result.output


@pytest.fixture
def home(tmp_path: Path) -> Path:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(SAMPLE, indent=2) + "\n")
    return tmp_path


def test_round_trip_keeps_everything_else(home: Path) -> None:
    path = home / ".claude" / "settings.json"
    original = path.read_text()
    code, out = run(home)
    assert code == 0 and "installed" in out and "restart" in out
    installed = json.loads(path.read_text())
    groups = installed["hooks"]["UserPromptSubmit"]
    assert groups[0] == SAMPLE["hooks"]["UserPromptSubmit"][0]  # the user's hook, first, untouched
    assert groups[1] == {"hooks": [{"type": "command", "command": COMMAND, "timeout": 5}]}
    assert {k: v for k, v in installed.items() if k != "hooks"} == {k: v for k, v in SAMPLE.items() if k != "hooks"}
    assert list(installed) == list(SAMPLE)  # key order kept
    assert installed["hooks"]["Stop"] == SAMPLE["hooks"]["Stop"]
    assert (home / ".claude" / "settings.json.bak").read_text() == original

    code, out = run(home)  # idempotent
    assert code == 0 and "already installed" in out and json.loads(path.read_text()) == installed

    code, out = run(home, "--uninstall")
    assert code == 0 and "removed" in out
    assert json.loads(path.read_text()) == SAMPLE and path.read_text() == original
    code, out = run(home, "--uninstall")
    assert code == 0 and "nothing to remove" in out


def test_dry_run_shows_a_diff_and_writes_nothing(home: Path) -> None:
    path = home / ".claude" / "settings.json"
    before = path.read_bytes()
    code, out = run(home, "--dry-run", "--url", "http://127.0.0.1:7000", "--source", "work brain")
    assert code == 0 and path.read_bytes() == before
    assert out.startswith(f"--- {path}\n+++ {path}\n")
    added = [line for line in out.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any("env VOLUNTEER_HOOK_URL=http://127.0.0.1:7000 'VOLUNTEER_SOURCE=work brain' "
               "/opt/venv/bin/volunteer hook user-prompt" in line for line in added)
    assert not [line for line in out.splitlines() if line.startswith("-") and not line.startswith("---")]


def test_reinstall_replaces_an_older_entry_of_ours(home: Path) -> None:
    path = home / ".claude" / "settings.json"
    run(home, "--url", "http://a:1")
    run(home, "--url", "http://b:2")
    groups = json.loads(path.read_text())["hooks"]["UserPromptSubmit"]
    ours = [h for g in groups for h in g["hooks"] if is_our_command(h["command"])]
    assert len(ours) == 1 and "http://b:2" in ours[0]["command"]


def test_a_shared_group_keeps_its_other_hooks() -> None:
    settings = {"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": "echo before"},
        {"type": "command", "command": "/x/volunteer hook user-prompt --harness claude-code"},
        {"type": "command", "command": "echo after"}]}]}}
    assert uninstall_from(settings) == 1
    assert settings == {"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": "echo before"}, {"type": "command", "command": "echo after"}]}]}}
    only = {"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": COMMAND}]}]}}
    assert uninstall_from(only) == 1 and only == {}  # containers that only held ours go too
    assert install_into(only, COMMAND) and not install_into(only, COMMAND)


def test_codex_settings_and_a_fresh_file(tmp_path: Path) -> None:
    code, out = run(tmp_path, "--harness", "codex")
    path = tmp_path / ".codex" / "hooks.json"
    assert code == 0 and "untrusted" in out and "--trust" in out
    assert json.loads(path.read_text()) == {"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": COMMAND + " --harness codex", "timeout": 5}]}]}}
    assert path.stat().st_mode & 0o777 == 0o600
    assert installed_command(path) == COMMAND + " --harness codex"
    code, _ = run(tmp_path, "--harness", "codex", "--uninstall")
    assert code == 0 and json.loads(path.read_text()) == {} and installed_command(path) is None


def test_scopes_and_paths(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path)}
    project = tmp_path / "proj"
    assert settings_path("claude-code", "user", project, env) == tmp_path / ".claude" / "settings.json"
    assert settings_path("claude-code", "project", project, env) == project.resolve() / ".claude" / "settings.json"
    assert settings_path("claude-code", "local", project, env) == project.resolve() / ".claude" / "settings.local.json"
    assert settings_path("codex", "project", project, env) == project.resolve() / ".codex" / "hooks.json"
    assert settings_path("codex", "user", None, {**env, "CODEX_HOME": "/cx"}) == Path("/cx/hooks.json")
    with pytest.raises(InstallError, match="no local settings scope"):
        settings_path("codex", "local", project, env)
    code, out = run(tmp_path, "--harness", "codex", "--scope", "local")
    assert code == 1 and "Error: Codex has no local settings scope" in out


@pytest.mark.parametrize(("content", "message"), [
    ("{oops", "is not valid JSON"),
    ("[1, 2]", "does not hold a JSON object"),
    ('{"hooks": []}', "'hooks' in the settings is not an object"),
    ('{"hooks": {"UserPromptSubmit": {}}}', "'hooks.UserPromptSubmit' in the settings is not a list"),
])
def test_files_it_cannot_understand_are_never_rewritten(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text(content)
    code, out = run(tmp_path)
    assert code == 1 and message in out and out.count("\n") == 1
    assert path.read_text() == content and not (tmp_path / ".claude" / "settings.json.bak").exists()


def test_indentation_of_the_file_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"a": {"b": 1}}, indent=4) + "\n")
    after = plan(path, uninstall=False, command=COMMAND).after
    assert after.splitlines()[1] == '    "a": {'


@pytest.mark.parametrize(("command", "ours"), [
    ("/opt/venv/bin/volunteer hook user-prompt", True),
    ("env VOLUNTEER_HOOK_URL=http://x:1 volunteer hook user-prompt --harness codex", True),
    ("/usr/bin/python3 -m pipeline hook user-prompt", True),
    ("volunteer hook session-start", False),
    ("other-tool hook user-prompt", False),
    ("echo 'volunteer hook user-prompt'", False),
    ("unbalanced 'quote", False),
])
def test_our_command_is_recognised_by_shape(command: str, ours: bool) -> None:
    assert is_our_command(command) is ours


def test_rendered_commands_are_shell_safe() -> None:
    command = hook_command("codex", ["/path with space/volunteer"], {"VOLUNTEER_SOURCE": "a;rm -rf /"})
    assert command == "env 'VOLUNTEER_SOURCE=a;rm -rf /' '/path with space/volunteer' hook user-prompt --harness codex"
    assert is_our_command(command)


def test_the_installed_command_starts_the_hook_without_path_site_or_environment(tmp_path: Path) -> None:
    """With nothing useful on PATH, bootstrap names this installation's interpreter and the hook's
    launcher by absolute path, with -I -S (no site-packages scan). That exact command, run by a shell
    as a harness does, is the hook: exit 0, nothing printed, the heartbeat says why (no worker
    listens); with other arguments it is the whole CLI, site-packages back on."""
    import shlex
    import subprocess
    import sys

    from pipeline.hook.install import LAUNCHER

    done = subprocess.run([sys.executable, "-m", "pipeline", "bootstrap"], capture_output=True, text=True,
                          env={"HOME": str(tmp_path), "PATH": "/nonexistent"}, timeout=60)
    assert done.returncode == 0, done.stderr
    command = json.loads((tmp_path / ".claude" / "settings.json").read_text())["hooks"]["UserPromptSubmit"][0][
        "hooks"][0]["command"]
    assert command == f"{sys.executable} -I -S {LAUNCHER} hook user-prompt"
    assert is_our_command(command)
    assert list((LAUNCHER.parent / "hook" / "__pycache__").glob("user_prompt.*.pyc")), "bootstrap writes the byte-code cache"
    env = {"HOME": str(tmp_path), "PATH": "/nonexistent", "PYTHONPATH": str(tmp_path / "nothing-here")}
    hook = subprocess.run(["/bin/sh", "-c", command], input=b'{"session_id": "s1", "prompt": "Alice Example?"}',
                          capture_output=True, env=env, timeout=60)
    assert (hook.returncode, hook.stdout, hook.stderr) == (0, b"", b"")
    beat = json.loads((tmp_path / ".local" / "state" / "volunteer" / "hooks" / "heartbeat.json").read_text())
    assert beat["channels"]["claude-code"]["last_reason"] == "no_worker"
    cli = shlex.split(command)[:-2]
    version = subprocess.run([*cli, "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("volunteer, version"), version.stderr
    helped = subprocess.run([*cli, "hook", "user-prompt", "--help"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert helped.returncode == 0 and "Usage: volunteer hook user-prompt" in helped.stdout, helped.stderr


def test_the_launcher_keeps_its_own_folder_off_the_import_path(tmp_path: Path) -> None:
    """Run without -I, the launcher's folder (which holds an ``http.py``) would come first on
    sys.path and stand in for the stdlib's modules; the launcher takes it off before importing."""
    import subprocess
    import sys

    from pipeline.hook.install import LAUNCHER

    probe = subprocess.run([sys.executable, "-S", str(LAUNCHER), "hook", "user-prompt"],
                           input=b'{"session_id": "s1", "prompt": "x"}', capture_output=True,
                           env={"HOME": str(tmp_path), "VOLUNTEER_HOOKS": "1"}, timeout=60)
    assert probe.returncode == 0 and probe.stderr == b""
    code = "\n".join([  # the folder first on sys.path, as 'python launch.py' has it
        f"import runpy, sys; sys.path.insert(0, {str(LAUNCHER.parent)!r}); sys.argv = ['x', '--version']",
        "try:",
        f"    runpy.run_path({str(LAUNCHER)!r}, run_name='__main__')",
        "except SystemExit:",
        "    pass",
        "import http.client",
        "print(http.client.__file__)"])
    shown = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                           env={"HOME": str(tmp_path)}, timeout=60)
    assert shown.returncode == 0 and shown.stdout.startswith("volunteer, version"), shown.stderr
    assert "pipeline" not in shown.stdout.splitlines()[-1]  # the stdlib's http, not pipeline/hook/http.py


@pytest.mark.parametrize(("command", "ours"), [
    ("/v/bin/python -I -S /v/lib/python3.11/site-packages/pipeline/launch.py hook user-prompt", True),
    ("/v/bin/python -I -S /v/lib/python3.11/site-packages/pipeline/hook/launch.py hook user-prompt", True),
    ("/v/bin/python -I -S /elsewhere/launch.py hook user-prompt", False),
])
def test_the_launcher_command_is_recognised(command: str, ours: bool) -> None:
    assert is_our_command(command) is ours


def test_a_symlinked_settings_file_stays_a_link_and_keeps_its_mode(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text(json.dumps(SAMPLE, indent=2) + "\n")
    dotfiles.chmod(0o640)
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(dotfiles)
    code, _ = run(tmp_path)
    assert code == 0
    assert link.is_symlink() and link.resolve() == dotfiles.resolve()
    assert installed_command(dotfiles) == COMMAND
    assert dotfiles.stat().st_mode & 0o777 == 0o640
    assert json.loads((tmp_path / ".claude" / "settings.json.bak").read_text()) == SAMPLE
    code, _ = run(tmp_path, "--uninstall")
    assert code == 0 and link.is_symlink() and json.loads(dotfiles.read_text()) == SAMPLE


def test_trust_text_keeps_the_rest_of_config_toml_and_refuses_what_it_cannot_edit() -> None:
    import tomllib

    from pipeline.hook.codex_trust import trust_text

    before = '# mine\nmodel = "o3"\n\n[projects."/src/app"]\ntrust_level = "trusted"\n'
    after = trust_text(before, "/h/.codex/hooks.json:user_prompt_submit:0:0", "sha256:aa")
    assert after.startswith(before)
    parsed = tomllib.loads(after)
    assert parsed["model"] == "o3" and parsed["projects"]["/src/app"] == {"trust_level": "trusted"}
    assert parsed["hooks"]["state"]["/h/.codex/hooks.json:user_prompt_submit:0:0"] == {"trusted_hash": "sha256:aa"}
    again = trust_text(after, "/h/.codex/hooks.json:user_prompt_submit:0:0", "sha256:bb")  # replaced in place
    assert again.count("trusted_hash") == 1 and "sha256:bb" in again
    with pytest.raises(InstallError, match="as text safely"):
        trust_text('hooks = { state = {} }\n', "/k:user_prompt_submit:0:0", "sha256:aa")
    with pytest.raises(InstallError, match="not valid TOML"):
        trust_text("model = \n", "/k", "sha256:aa")


def test_trust_is_refused_outside_codex(home: Path) -> None:
    code, out = run(home, "--trust")
    assert code == 2 and "--trust only applies" in out


def test_opencode_plugin_install_is_idempotent_and_uninstall_deletes_only_ours(tmp_path: Path) -> None:
    from pipeline.hook.opencode import plugin_command

    plugin = tmp_path / ".config" / "opencode" / "plugins" / "volunteer-stream.js"
    code, out = run(tmp_path, "--harness", "opencode", "--url", "http://127.0.0.1:7001")
    assert code == 0 and plugin.exists()
    command = "env VOLUNTEER_HOOK_URL=http://127.0.0.1:7001 /opt/venv/bin/volunteer hook user-prompt --harness opencode"
    assert plugin_command(plugin.read_text()) == command == installed_command(plugin)
    assert json.dumps(command) in plugin.read_text() and "chat.message" in plugin.read_text()
    assert run(tmp_path, "--harness", "opencode", "--url", "http://127.0.0.1:7001")[1].count("already installed") == 1
    code, _ = run(tmp_path, "--harness", "opencode", "--uninstall")
    assert code == 0 and not plugin.exists()
    plugin.write_text("export const Other = async () => ({})\n")  # someone else's file of that name
    code, out = run(tmp_path, "--harness", "opencode")
    assert code == 1 and "is not the volunteer-stream plugin" in out
    assert plugin.read_text() == "export const Other = async () => ({})\n"
    code, out = run(tmp_path, "--harness", "opencode", "--scope", "local")
    assert code == 1 and "no local settings scope" in out
