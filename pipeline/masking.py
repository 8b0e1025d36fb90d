"""Passwords out of every message: the one masking function the commands, the worker log and the sinks use.

A database URL reaches messages in two ways: we print it (``cannot reach the database at …``), or
libpq quotes it back in its own error, sometimes only a piece of it (``invalid percent-encoded
token: "Top%Secret"`` for ``postgresql://admin:Top%Secret@…``). So masking works on any text, not
on a parsed URL, and in two steps:

1. patterns: a ``user:password@`` in any URL-like token, well-formed or not
   (``postgresql//admin:TopSecret99@host`` is masked too), and ``password=…`` in a conninfo string
   or URL query;
2. known secrets: every password those patterns find in this process's ``VOLUNTEER_*``/``PG*``
   environment and command line, raw and percent-decoded, is replaced wherever it appears, which
   catches the fragments libpq quotes without their ``@``.

Over-masking (an odd token that merely looks like ``a:b@c``) is accepted; a leak is not.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from urllib.parse import unquote

MASK = "***"
MIN_SECRET_CHARS = 4
"""Shorter "passwords" are not replaced as bare text (masking every ``a`` would wreck messages)."""

_USERINFO = re.compile(r"(?P<user>[^\s:/@'\"=]*):(?P<password>[^\s/'\"]*)@")
"""``user:password@``: the password runs to the *last* ``@`` before a ``/`` (an unescaped ``@`` in it).

A ``/`` ends it because libpq itself looks for credentials only before the first ``/``."""
_KEYWORD = re.compile(r"(?P<key>\bpassword\s*=\s*)(?P<password>'(?:[^'\\]|\\.)*'|[^\s&'\"]+)", re.IGNORECASE)
_SECRET_ENV_PREFIXES = ("VOLUNTEER_", "PG")


def passwords_in(text: str) -> set[str]:
    """The passwords the patterns see in ``text``, raw and percent-decoded (quotes stripped)."""
    found: set[str] = set()
    for match in _USERINFO.finditer(text):
        found.add(match.group("password"))
    for match in _KEYWORD.finditer(text):
        value = match.group("password")
        if value.startswith("'") and value.endswith("'") and len(value) >= 2:
            value = value[1:-1].replace("\\'", "'").replace("\\\\", "\\")
        found.add(value)
    decoded = {unquote(value) for value in found}
    return {value for value in found | decoded if value and value != MASK}


def process_secrets() -> frozenset[str]:
    """Passwords named in this process's settings-like environment and command line."""
    texts = [value for key, value in os.environ.items() if key.startswith(_SECRET_ENV_PREFIXES)]
    texts.extend(sys.argv[1:])
    found: set[str] = set()
    for text in texts:
        found |= passwords_in(text)
    for key in ("PGPASSWORD", "VOLUNTEER_KAFKA_SASL_PASSWORD", "VOLUNTEER_WORKER_ROLE_PASSWORD",
                "VOLUNTEER_STATE_KEY", "VOLUNTEER_HOOK_TOKEN"):
        value = os.environ.get(key)
        if value:
            found.add(value)
    return frozenset(found)


def mask(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every password it may hold replaced by ``***`` (see the module docstring).

    ``secrets``: the passwords to replace as bare text; :func:`process_secrets` when not given (a
    long-lived caller such as the log formatter computes them once and passes them).
    """
    known = set(process_secrets() if secrets is None else secrets) | passwords_in(text)
    masked = _USERINFO.sub(lambda m: f"{m.group('user')}:{MASK}@", text)
    masked = _KEYWORD.sub(lambda m: f"{m.group('key')}{MASK}", masked)
    for secret in sorted((s for s in known if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True):
        masked = masked.replace(secret, MASK)
    return masked
