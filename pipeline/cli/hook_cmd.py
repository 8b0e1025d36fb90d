"""``volunteer hook``: the commands a harness (Claude Code, Codex) runs as hooks.

Kept import-light on purpose: this module and :mod:`pipeline.hook` load only click, orjson and
the standard library, because the hook's whole run counts against the prompt's latency.
"""

from __future__ import annotations

import sys

import click

from pipeline.hook.protocol import DEFAULT_HARNESS, HOOK_CHANNELS


@click.group(name="hook")
def hook() -> None:
    """Hooks for AI harnesses (installed by 'volunteer bootstrap')."""


@hook.command(name="user-prompt")
@click.option("--harness", type=click.Choice(HOOK_CHANNELS), default=DEFAULT_HARNESS, show_default=True,
              help="Which harness calls the hook; also the channel its pages are logged under.")
def user_prompt(harness: str) -> None:
    """Volunteer brain pages for the prompt being submitted (UserPromptSubmit hook).

    Reads the harness's hook JSON on stdin (session_id, prompt, transcript_path, cwd), sends
    the prompt (and, on a session's first prompt, its last few transcript turns) to a running
    'volunteer worker', and prints the pages volunteered for it as
    {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": ...}}.
    Only printed pages count as volunteered (context_volunteer_events, 'volunteer stats').

    It never blocks the prompt: after the deadline, when nothing clears the gate, or on any
    error it prints nothing and exits 0 (the reason goes to the heartbeat 'volunteer doctor'
    reads).

    \b
    Environment:
      VOLUNTEER_HOOKS=0              kill switch: do nothing at all
      VOLUNTEER_HOOK_URL             the worker's web address (default http://127.0.0.1:6066)
      VOLUNTEER_HOOK_DEADLINE_MS     total time budget from process start (default 800)
      VOLUNTEER_HOOK_MAX_CHARS       output cap (default and maximum 10000)
      VOLUNTEER_HOOK_WARM_TURNS      transcript turns sent on a session's first prompt (default 4)
      VOLUNTEER_HOOK_STATE_DIR       state and heartbeat (default ~/.local/state/volunteer/hooks)
      VOLUNTEER_SOURCE               brain source to resolve against (default: the worker's)

    \b
    Try it against a running worker:
      echo '{"session_id":"s1","prompt":"Did Alice Example reply?"}' | volunteer hook user-prompt
    """
    from pipeline.hook.user_prompt import run

    sys.exit(run(harness))
