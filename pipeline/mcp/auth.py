"""The credential of ``volunteer mcp --http``: a bearer token, the same secret as the hook lane's.

Over stdio the client started the server itself, so there is nothing to check. Over HTTP anybody
who can reach the port could ask, so every request must carry ``Authorization: Bearer <token>``;
a missing or wrong token gets ``401`` before the MCP layer sees the request.

:func:`shared_hook_credential` is the single place that decides which secret that is:
``VOLUNTEER_HOOK_TOKEN`` when set, else the contents of ``--token-file``. It is deliberately one
small function so that it can be pointed at the hook lane's per-user token file
(``pipeline.hook``'s credential module) without touching the server.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TOKEN_ENV = "VOLUNTEER_HOOK_TOKEN"
MIN_TOKEN_CHARS = 16
MAX_TOKEN_FILE_BYTES = 4096


class CredentialError(ValueError):
    """No usable credential; the message says what to set."""


def shared_hook_credential(token_file: str | None, env: Mapping[str, str] | None = None) -> str:
    """The bearer secret: ``VOLUNTEER_HOOK_TOKEN``, else the first line of ``token_file``.

    Refuses a token shorter than 16 characters, and a token file that others can read (it must be
    0600 or stricter, like an SSH key), with a one-line :class:`CredentialError`.
    """
    environ = os.environ if env is None else env
    token = environ.get(TOKEN_ENV, "").strip()
    source = TOKEN_ENV
    if not token:
        if not token_file:
            raise CredentialError(
                f"--http needs a credential: set {TOKEN_ENV} or pass --token-file PATH "
                "(a file holding a secret of at least 16 characters, mode 0600)"
            )
        path = Path(token_file)
        try:
            mode = path.stat().st_mode
            data = path.read_bytes()[:MAX_TOKEN_FILE_BYTES]
        except OSError as exc:
            raise CredentialError(f"cannot read the token file {token_file}: {exc.strerror or exc}") from None
        if mode & 0o077:
            raise CredentialError(f"the token file {token_file} is readable by others (chmod 600 it)")
        lines = data.decode("utf-8", "replace").strip().splitlines()
        token = lines[0].strip() if lines else ""
        source = f"the token file {token_file}"
    if len(token) < MIN_TOKEN_CHARS:
        raise CredentialError(f"the credential from {source} is shorter than {MIN_TOKEN_CHARS} characters")
    return token


def bearer_matches(header: bytes | None, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time."""
    if not header:
        return False
    scheme, _, value = header.decode("latin-1").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(value.strip().encode("utf-8"), token.encode("utf-8"))


Scope = dict[str, Any]
ASGIApp = Any


class RequireBearer:
    """ASGI middleware: HTTP requests without the right bearer token get 401 and go no further."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            headers = dict(scope.get("headers") or [])
            if not bearer_matches(headers.get(b"authorization"), self.token):
                body = b'{"error":"unauthorized","message":"missing or wrong bearer credential"}'
                await send({
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"www-authenticate", b'Bearer realm="volunteer"'),
                    ],
                })
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
