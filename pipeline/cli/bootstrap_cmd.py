"""``volunteer bootstrap``: install (or remove) the UserPromptSubmit hook in a harness's settings."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import click

from pipeline.hook.codex_trust import (
    TRUST_EXPLAINED,
    TRUSTED,
    config_path,
    our_hook,
    trust_status,
    trust_with_codex,
    trust_without_codex,
)
from pipeline.hook.install import (
    DEFAULT_TIMEOUT_S,
    HARNESSES,
    SCOPES,
    InstallError,
    Plan,
    apply,
    default_executable,
    hook_command,
    plan,
    settings_path,
    warm_bytecode,
)


@click.command(name="bootstrap")
@click.option("--harness", type=click.Choice(HARNESSES), default="claude-code", show_default=True,
              help="Which harness to wire up.")
@click.option("--scope", type=click.Choice(SCOPES), default="user", show_default=True,
              help="user: every session of this user; project: <dir>/.claude/settings.json (shared "
                   "with the repository); local: <dir>/.claude/settings.local.json (Claude Code only).")
@click.option("--project-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Project folder for --scope project/local (default: the current folder).")
@click.option("--uninstall", is_flag=True, help="Remove the hook instead of installing it.")
@click.option("--dry-run", is_flag=True, help="Show the change as a diff; write nothing.")
@click.option("--url", metavar="URL", default=None,
              help="Worker web address baked into the hook command (VOLUNTEER_HOOK_URL; default "
                   "http://127.0.0.1:6066).")
@click.option("--source", metavar="ID", default=None, help="Brain source baked into the hook command.")
@click.option("--executable", metavar="PATH", default=None,
              help="The volunteer executable the harness runs (default: this installation's interpreter "
                   "with -I -S and its hook launcher, by absolute paths, whatever PATH says).")
@click.option("--timeout", "timeout_s", type=click.IntRange(1, 600), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds after which the harness kills the hook (it stops itself after 800 ms).")
@click.option("--trust", is_flag=True,
              help="Codex: also record that you trust this hook (Codex skips untrusted hooks silently), in "
                   "$CODEX_HOME/config.toml, through 'codex app-server' when a codex executable is found.")
@click.option("--codex", "codex_bin", metavar="PATH", default=None,
              help="The codex executable used by --trust (default: 'codex' on PATH; without one, the entry "
                   "is computed here and added to config.toml as text).")
def bootstrap(harness: str, scope: str, project_dir: Path | None, uninstall: bool, dry_run: bool,
              url: str | None, source: str | None, executable: str | None, timeout_s: int, trust: bool,
              codex_bin: str | None) -> None:
    """Install the 'volunteer hook user-prompt' hook in Claude Code, Codex or opencode.

    Adds one UserPromptSubmit entry to the harness's settings, keeping every other setting and
    hook as it was; running it again changes nothing, and --uninstall removes exactly what it
    added. The previous file is kept next to it as <name>.bak; a symlinked settings file is
    written through (the link stays) and keeps its mode.

    \b
    Where the settings are:
      claude-code  user: ~/.claude/settings.json      project: DIR/.claude/settings.json
                   local: DIR/.claude/settings.local.json
      codex        user: ~/.codex/hooks.json          project: DIR/.codex/hooks.json
      opencode     user: ~/.config/opencode/plugins/volunteer-stream.js
                   project: DIR/.opencode/plugins/volunteer-stream.js  (a plugin running the hook)

    The hook needs a running worker with its web server on (volunteer worker, port 6066 by
    default). Harnesses read hooks when a session starts: restart open sessions afterwards.

    Codex runs a hook only after you trust it, and the trust is tied to the hook's command (a new
    --url makes it untrusted again). Trust it in Codex with /hooks, or pass --trust.

    \b
    Examples:
      volunteer bootstrap --dry-run                 # see the change to ~/.claude/settings.json
      volunteer bootstrap                           # install it
      volunteer bootstrap --harness codex --trust   # install it for Codex and trust it
      volunteer bootstrap --harness codex --scope project --project-dir ~/src/app
      volunteer bootstrap --harness opencode        # the plugin in ~/.config/opencode/plugins
      volunteer bootstrap --uninstall
    """
    if trust and (harness != "codex" or uninstall):
        raise click.UsageError("--trust only applies when installing the Codex hook (--harness codex)")
    try:
        path = settings_path(harness, scope, project_dir)
        env_vars = {k: v for k, v in (("VOLUNTEER_HOOK_URL", url), ("VOLUNTEER_SOURCE", source)) if v}
        command = hook_command(harness, [executable] if executable else default_executable(), env_vars)
        change = plan(path, uninstall=uninstall, command=command, timeout_s=timeout_s)
        if dry_run:
            click.echo(change.diff() if change.changed else change.summary)
            if harness == "codex" and not uninstall:
                _codex_dry_run(change, trust)
            if change.changed:
                click.echo("(dry run: nothing written)", err=True)
            return
        backup = apply(change)
    except InstallError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(change.summary + (f" (previous file kept as {backup})" if backup else ""))
    if not uninstall:
        warm_bytecode()  # the first prompt then starts as fast as the others
    if change.changed and not uninstall:
        click.echo(f"command: {command}")
        click.echo("restart open sessions: hooks are read when a session starts")
        from pipeline.cli.up_cmd import announce_credential

        announce_credential()
    if harness == "codex" and not uninstall:
        _codex_trust(path, trust, codex_bin, (project_dir or Path.cwd()).resolve())


def _codex_dry_run(change: Plan, trust: bool) -> None:
    hook = our_hook(change.path, json.loads(change.after) if change.after.strip() else {})
    if hook is None:
        return
    config = config_path()
    if trust_status(hook, config) == TRUSTED:
        click.echo(f"Codex trusts this hook already ({config})")
    elif trust:
        click.echo(f"--trust would record in {config}:\n  [hooks.state.{json.dumps(hook.key)}]\n"
                   f"  trusted_hash = {json.dumps(hook.current_hash)}")
    else:
        click.echo(TRUST_EXPLAINED.format(config=config))


def _codex_trust(path: Path, trust: bool, codex_bin: str | None, cwd: Path) -> None:
    hook = our_hook(path)
    if hook is None:
        return
    config = config_path()
    status = trust_status(hook, config)
    if status == TRUSTED:
        click.echo(f"Codex trusts this hook ({config})")
        return
    if not trust:
        click.echo(f"Codex: this hook is {status}. " + TRUST_EXPLAINED.format(config=config))
        return
    codex = codex_bin or shutil.which("codex")
    try:
        if codex:
            trust_with_codex(hook, codex, os.environ, cwd)
            how = f"by {codex} app-server"
        else:
            trust_without_codex(hook, config)
            how = "computed here (no codex executable found)"
    except InstallError as exc:
        raise click.ClickException(str(exc)) from None
    if trust_status(hook, config) != TRUSTED:
        raise click.ClickException(f"the trust entry for {hook.key} is not in {config} after writing it")
    click.echo(f"Codex: trusted this hook in {config}, {how}; a changed command (for example a new --url) "
               "needs --trust again")

