"""Where the settings come from in the environment: ``VOLUNTEER_<NAME>``, the name in any letter case.

Kept apart from :mod:`pipeline.settings` (the pydantic model) so that a command can ask whether the
environment sets anything at all without importing pydantic: when nothing is set, the settings
are their defaults, which need no validation (``volunteer replay`` then skips the model and its
~0.1 s of CPU; see :func:`pipeline.cli.options.settings_if_set`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

ENV_PREFIX = "VOLUNTEER_"
"""Each setting is read from the variable ``VOLUNTEER_<NAME>``, in any letter case."""


def environment(names: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``{name: value}`` of the ``VOLUNTEER_<NAME>`` variables set for ``names``, matched in any case.

    Like pydantic-settings without ``case_sensitive``: every variable name is lower-cased first,
    so of two spellings of one name the later in the environment wins.
    """
    lowered = {key.lower(): value for key, value in (os.environ if environ is None else environ).items()}
    prefix = ENV_PREFIX.lower()
    found = {}
    for name in names:
        value = lowered.get(prefix + name.lower())
        if value is not None:
            found[name] = value
    return found


def any_variable(environ: Mapping[str, str] | None = None) -> bool:
    """Whether any ``VOLUNTEER_*`` variable is set, a setting or not (``VOLUNTEER_BRAIN`` counts too)."""
    prefix = ENV_PREFIX.lower()
    return any(key.lower().startswith(prefix) for key in (os.environ if environ is None else environ))
