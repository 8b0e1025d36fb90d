"""The ``volunteer`` executable's entry point: ``volunteer hook user-prompt`` without click.

A harness starts the hook as a fresh process for every prompt, and importing click and the CLI
package costs ~20 ms of CPU, a third of the hook's whole start-up. So this entry answers that one
command itself when its arguments are plain (``--harness X``, ``--url V``, ``--url=V``, …, the
options of :data:`pipeline.hook.config.OPTIONS`), and hands everything else (every other command,
``--help``, anything it does not recognise) to the click CLI in :mod:`pipeline.cli`, which defines
the same options and gives the usual help and errors.

It is also what :mod:`pipeline.launch` runs under ``python -I -S`` (the command ``volunteer
bootstrap`` writes); that interpreter has no site-packages, so before handing over to click this
entry turns them on (``site.main()``) and the garbage collector back on, and every command works
from that command line too.
"""

from __future__ import annotations

import os
import sys


def parse_user_prompt(args: list[str]) -> tuple[str, dict[str, str]] | None:
    """``(harness, {variable: value})`` for plain arguments; ``None`` means "let click handle it"."""
    from pipeline.hook.config import OPTIONS
    from pipeline.hook.protocol import DEFAULT_HARNESS
    from topics.delivery import HOOK_CHANNELS

    variables = {flag: variable for flag, variable, _ in OPTIONS}
    harness = DEFAULT_HARNESS
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        name, equals, inline = args[i].partition("=")
        if name != "--harness" and name not in variables:
            return None
        if equals:
            value, i = inline, i + 1
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 2
        else:
            return None
        if name == "--harness":
            if value not in HOOK_CHANNELS:
                return None
            harness = value
        else:
            values[variables[name]] = value
    return harness, values


def main() -> None:
    args = sys.argv[1:]
    if args[:2] == ["hook", "user-prompt"]:
        parsed = parse_user_prompt(args[2:])
        if parsed is not None:
            from pipeline.hook.user_prompt import run

            harness, values = parsed
            env = dict(os.environ)
            env.update(values)  # flags win over the environment, as with click
            code = run(harness, env=env)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)  # nothing left to clean up; interpreter teardown would only add latency
    if sys.flags.no_site:  # started by pipeline.launch: click and the rest live in site-packages
        import site

        site.main()
    import gc

    if args[:1] == ["replay"]:
        # Off until the command has imported its modules and loaded the brain (it turns it back on):
        # the collections would only walk the import-time objects again, ~7% of a replay's start-up.
        gc.disable()
    else:
        gc.enable()  # off in pipeline.launch, for the one-prompt process only
    from pipeline.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
