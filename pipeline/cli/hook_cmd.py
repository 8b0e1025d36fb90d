"""``volunteer hook``: the commands a harness (Claude Code, Codex) runs as hooks.

The ``volunteer`` executable usually answers ``hook user-prompt`` without loading click at all
(:mod:`pipeline.entry`); this click command is the same thing with help and argument errors,
and what ``python -m pipeline hook user-prompt`` runs. Both read :data:`pipeline.hook.config.OPTIONS`.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from pipeline.hook.config import OPTIONS
from pipeline.hook.protocol import DEFAULT_HARNESS
from topics.delivery import HOOK_CHANNELS


@click.group(name="hook")
def hook() -> None:
    """Hooks for AI harnesses (installed by 'volunteer bootstrap')."""


def _env_options(func: Any) -> Any:
    for flag, variable, text in reversed(OPTIONS):
        func = click.option(flag, variable, envvar=variable, default=None, metavar="VALUE",
                            help=f"{text} [env: {variable}]")(func)
    return func


@hook.command(name="user-prompt")
@click.option("--harness", type=click.Choice(HOOK_CHANNELS), default=DEFAULT_HARNESS, show_default=True,
              help="Which harness calls the hook; also the channel its pages are logged under.")
@_env_options
def user_prompt(harness: str, **values: str | None) -> None:
    """Volunteer brain pages for the prompt being submitted (UserPromptSubmit hook).

    Reads the harness's hook JSON on stdin (session_id, prompt, transcript_path, cwd), sends
    the prompt (and, on a session's first prompt, its last few transcript turns) to a running
    'volunteer worker', and prints the pages volunteered for it as
    {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": ...}}.
    Only printed pages count as volunteered (context_volunteer_events, 'volunteer stats').

    It never blocks the prompt: after the deadline, when nothing clears the gate, or on any
    error it prints nothing and exits 0 (the reason goes to the heartbeat that 'volunteer
    doctor' reads). Every option can also be set by its environment variable.

    \b
    Try it against a running worker:
      echo '{"session_id":"s1","prompt":"Did Alice Example reply?"}' | volunteer hook user-prompt
    """
    import os

    from pipeline.hook.user_prompt import run

    env = dict(os.environ)
    env.update({variable: value for variable, value in values.items() if value is not None})
    code = run(harness, env=env)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # nothing left to clean up; interpreter teardown would only add latency
