"""The ``volunteer`` command line. Each command lives in its own module, loaded on demand.

Loading lazily keeps ``volunteer context`` (a per-turn tool) from importing Faust and psycopg.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import click

# command name -> "module:attribute"; a command appears only once its module exists.
COMMANDS: dict[str, tuple[str, str]] = {
    "context": ("pipeline.cli.context_cmd", "context"),
    "replay": ("pipeline.cli.replay_cmd", "replay"),
    "worker": ("pipeline.cli.worker_cmd", "worker"),
    "feed": ("pipeline.cli.feed_cmd", "feed"),
    "watch": ("pipeline.cli.watch_cmd", "watch"),
    "stats": ("pipeline.cli.stats_cmd", "stats"),
    "purge": ("pipeline.cli.purge_cmd", "purge"),
    "migrate": ("pipeline.cli.migrate_cmd", "migrate"),
    "brain": ("pipeline.cli.brain_cmd", "brain"),
    "up": ("pipeline.cli.up_cmd", "up"),
    "demo": ("pipeline.cli.demo_cmd", "demo"),
    "opened": ("pipeline.cli.opened_cmd", "opened"),
    "doctor": ("pipeline.cli.doctor_cmd", "doctor"),
    "hook": ("pipeline.cli.hook_cmd", "hook"),
    "bootstrap": ("pipeline.cli.bootstrap_cmd", "bootstrap"),
    "mcp": ("pipeline.cli.mcp_cmd", "mcp"),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, (mod, _) in COMMANDS.items() if importlib.util.find_spec(mod) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None or importlib.util.find_spec(target[0]) is None:
            return None
        module = importlib.import_module(target[0])
        command: Any = getattr(module, target[1])
        assert isinstance(command, click.Command)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; whatever error escapes it leaves as one line with passwords masked."""
        from pipeline.cli.errors import one_line_errors

        with one_line_errors():
            return super().invoke(ctx)


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the package version, and the decision core's build (compiled or pure Python)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from pipeline.corebuild import core_build

    click.echo(f"volunteer, version {version('volunteer-stream')}\ndecision core: {core_build()}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and which build of the decision core runs, then exit.")
def main() -> None:
    """volunteer-stream: the brain volunteers relevant pages from live conversations.

    \b
    Quick start (nothing else running):
      volunteer demo                      the whole pipeline on embedded services
      volunteer context < window.txt      one-shot decision over a window of turns
      volunteer replay turns.jsonl        replay a transcript, no broker needed

    Settings come from flags, then VOLUNTEER_* environment variables, then defaults.
    """
