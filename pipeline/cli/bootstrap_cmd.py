"""``volunteer bootstrap``: install (or remove) the UserPromptSubmit hook in a harness's settings."""

from __future__ import annotations

from pathlib import Path

import click

from pipeline.hook.install import (
    DEFAULT_TIMEOUT_S,
    HARNESSES,
    SCOPES,
    InstallError,
    apply,
    default_executable,
    hook_command,
    plan,
    settings_path,
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
              help="The volunteer executable the harness runs (default: this installation's, absolute).")
@click.option("--timeout", "timeout_s", type=click.IntRange(1, 600), default=DEFAULT_TIMEOUT_S, show_default=True,
              help="Seconds after which the harness kills the hook (it stops itself after 800 ms).")
def bootstrap(harness: str, scope: str, project_dir: Path | None, uninstall: bool, dry_run: bool,
              url: str | None, source: str | None, executable: str | None, timeout_s: int) -> None:
    """Install the 'volunteer hook user-prompt' hook in Claude Code or Codex.

    Adds one UserPromptSubmit entry to the harness's settings, keeping every other setting and
    hook as it was; running it again changes nothing, and --uninstall removes exactly what it
    added. The previous file is kept next to it as <name>.bak.

    \b
    Where the settings are:
      claude-code  user: ~/.claude/settings.json      project: DIR/.claude/settings.json
                   local: DIR/.claude/settings.local.json
      codex        user: ~/.codex/hooks.json          project: DIR/.codex/hooks.json

    The hook needs a running worker with its web server on (volunteer worker, port 6066 by
    default). Harnesses read hooks when a session starts: restart open sessions afterwards.

    \b
    Examples:
      volunteer bootstrap --dry-run                 # see the change to ~/.claude/settings.json
      volunteer bootstrap                           # install it
      volunteer bootstrap --harness codex --scope project --project-dir ~/src/app
      volunteer bootstrap --uninstall
    """
    try:
        path = settings_path(harness, scope, project_dir)
        env_vars = {k: v for k, v in (("VOLUNTEER_HOOK_URL", url), ("VOLUNTEER_SOURCE", source)) if v}
        command = hook_command(harness, [executable] if executable else default_executable(), env_vars)
        change = plan(path, uninstall=uninstall, command=command, timeout_s=timeout_s)
        if dry_run:
            click.echo(change.diff() if change.changed else change.summary)
            if change.changed:
                click.echo("(dry run: nothing written)", err=True)
            return
        backup = apply(change)
    except InstallError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(change.summary + (f" (previous file kept as {backup})" if backup else ""))
    if change.changed and not uninstall:
        click.echo(f"command: {command}")
        click.echo("restart open sessions: hooks are read when a session starts")
        from pipeline.cli.up_cmd import announce_credential

        announce_credential()
        if harness == "codex":
            click.echo("Codex versions where hooks are still opt-in also need '[features]' 'hooks = true' "
                       "in ~/.codex/config.toml")
