"""The worker's side of the agent edge: its web port, address, TLS, credential, request checks and
its entry in the worker registry (docs/hooks.md "Finding the worker", docs/security.md).

- **Port.** The configured ``web_port`` is probed with ``SO_REUSEADDR``, exactly how the web server
  binds it, so connections of a previous worker in TIME_WAIT never move it. A port another process
  really listens on is a one-line start-up error naming the port and the setting; it is never
  replaced silently. ``web_port=0`` takes any free port, and hooks find it in the registry.
- **Address.** The server binds ``web_host``; other workers and hooks use ``web_advertised_url``
  (Faust's ``canonical_url``, which its router puts in the group metadata: forwarding between
  workers on different hosts goes to the advertised URLs).
- **Checks**, in :class:`EdgeGuard`, an aiohttp middleware in front of every route: only the hook
  paths and the probes (``/livez``, ``/readyz``: GET, unsigned, no secret in them) exist (Faust's own routes answer 404); a request with an ``Origin`` header, or a
  non-loopback ``Host`` while bound to loopback (DNS rebinding), is refused; POSTs must be
  ``application/json``; the body must arrive within :data:`BODY_TIMEOUT_S`; the request must be
  signed with the secret (fresh, not replayed); every answer carries the worker's proof. A client
  that goes away is logged at DEBUG, not as an ERROR traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import socket
import ssl
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from pipeline.agents.health import PROBE_PATHS
from pipeline.hook import registry
from pipeline.hook.credential import (
    AUTH_HEADER,
    MAX_CLOCK_SKEW_MS,
    PROOF_HEADER,
    STATE_DIR_ENV,
    TOKEN_ENV,
    CredentialError,
    answer_proof,
    load_token,
    parse_auth,
    private_dir,
    request_is_signed,
    state_base,
)
from pipeline.hook.protocol import HOOK_PATHS
from pipeline.settings import Settings

log = logging.getLogger(__name__)

BODY_TIMEOUT_S = 5.0
"""A request body not complete by then is refused (408): a slow client cannot hold a handler."""
MAX_SEEN_NONCES = 100_000


class EdgeSetupError(RuntimeError):
    """The web edge cannot start as configured; one line that says what to fix."""


# ----------------------------------------------------------------------------- port and address


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Could the web server bind ``host:port``? Probed the way it binds (``SO_REUSEADDR``), so a
    port held only by TIME_WAIT connections of a stopped worker counts as free."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def choose_web_port(settings: Settings, requested: int | None = None) -> int:
    """The port to serve: the configured one if it can be bound, any free one for 0, else an error."""
    port = settings.web_port if requested is None else requested
    host = settings.web_host
    if not 0 <= port <= 65535:
        raise EdgeSetupError(f"web port {port} is out of range (VOLUNTEER_WEB_PORT / --web-port: 0-65535)")
    if port == 0:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            return int(sock.getsockname()[1])
    if not port_is_free(port, host):
        raise EdgeSetupError(
            f"web port {port} on {host} is taken by another process (VOLUNTEER_WEB_PORT / --web-port): stop it, "
            f"choose another port, or use --web-port 0 (any free port; hooks find it in the worker registry)")
    return port


def advertised_url(settings: Settings, port: int) -> str:
    """``web_advertised_url``, else derived from the bind address (the host name for 0.0.0.0 / ::)."""
    if settings.web_advertised_url:
        url = settings.web_advertised_url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise EdgeSetupError(f"VOLUNTEER_WEB_ADVERTISED_URL must start with http:// or https://, not {url[:40]!r}")
        return url
    host = settings.web_host.strip()
    if host in ("", "0.0.0.0", "::"):
        host = socket.getfqdn()
    if ":" in host:
        host = f"[{host}]"
    scheme = "https" if settings.web_tls_certfile else "http"
    return f"{scheme}://{host}:{port}"


def binds_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_header_is_loopback(value: str) -> bool:
    host = value.strip()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return binds_loopback(host.lower())


# ----------------------------------------------------------------------------- TLS and credential


def server_ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if not settings.web_tls_certfile:
        if settings.web_tls_keyfile:
            raise EdgeSetupError("VOLUNTEER_WEB_TLS_KEYFILE is set without VOLUNTEER_WEB_TLS_CERTFILE")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(settings.web_tls_certfile, settings.web_tls_keyfile or None)
    except (OSError, ssl.SSLError) as exc:
        raise EdgeSetupError(f"cannot load the web server's certificate {settings.web_tls_certfile}: {exc}") from None
    return context


def client_ssl_context(settings: Settings) -> ssl.SSLContext:
    """Verifies other workers when forwarding to an ``https://`` advertised URL."""
    try:
        return ssl.create_default_context(cafile=settings.web_tls_cafile or None)
    except (OSError, ssl.SSLError) as exc:
        raise EdgeSetupError(f"cannot load VOLUNTEER_WEB_TLS_CAFILE {settings.web_tls_cafile}: {exc}") from None


def settings_env(settings: Settings) -> dict[str, str]:
    """The credential module's view of the settings (it reads variables, like the hook)."""
    env = {"HOME": os.environ.get("HOME", ""), "XDG_STATE_HOME": os.environ.get("XDG_STATE_HOME", "")}
    if settings.state_dir:
        env[STATE_DIR_ENV] = settings.state_dir
    if settings.hook_token:
        env[TOKEN_ENV] = settings.hook_token
    return env


def worker_token(settings: Settings) -> str:
    """The secret: ``hook_token``, else the state directory's file (created if missing)."""
    try:
        token = load_token(settings_env(settings), create=True)
    except (CredentialError, OSError) as exc:
        raise EdgeSetupError(f"hook credential: {exc}") from None
    assert token is not None
    return token


# ----------------------------------------------------------------------------- request checks


def _refuse(status: int, error: str) -> Any:
    from aiohttp import web

    return web.json_response({"status": "refused", "error": error}, status=status)


class EdgeGuard:
    """Every check a request passes before a hook view sees it, and the proof on every answer."""

    def __init__(self, token: str, *, loopback: bool) -> None:
        self.token = token
        self.loopback = loopback
        self._seen: OrderedDict[str, int] = OrderedDict()
        self.refused = 0

    def _fresh_nonce(self, nonce: str, now_ms: int) -> bool:
        seen = self._seen
        while seen:
            oldest, at = next(iter(seen.items()))
            if now_ms - at <= 2 * MAX_CLOCK_SKEW_MS and len(seen) < MAX_SEEN_NONCES:
                break
            del seen[oldest]
        if nonce in seen:
            return False
        seen[nonce] = now_ms
        return True

    async def check(self, request: Any) -> tuple[Any, str | None]:
        """``(refusal, None)`` or ``(None, request_mac)``."""
        headers = request.headers
        if request.path in PROBE_PATHS:  # unsigned by design: probes hold no secret (agents/health.py)
            if request.method not in ("GET", "HEAD"):
                return _refuse(405, "probes answer GET only"), None
            if "Origin" in headers:
                return _refuse(403, "requests from web pages are refused"), None
            return None, None
        if request.path not in HOOK_PATHS:
            return _refuse(404, "not found"), None
        if "Origin" in headers:
            return _refuse(403, "requests from web pages are refused"), None
        if self.loopback and not host_header_is_loopback(headers.get("Host", "")):
            return _refuse(403, "this endpoint answers loopback host names only"), None
        if request.method == "POST" and request.content_type != "application/json":
            return _refuse(415, "Content-Type must be application/json"), None
        try:
            body = await asyncio.wait_for(request.read(), BODY_TIMEOUT_S)
        except TimeoutError:
            return _refuse(408, f"body not received within {BODY_TIMEOUT_S:g} s"), None
        now_ms = int(time.time() * 1000)
        value = headers.get(AUTH_HEADER, "")
        mac = request_is_signed(self.token, request.method, request.path_qs, body, value, now_ms)
        parsed = parse_auth(value)
        if mac is None or parsed is None or not self._fresh_nonce(parsed[1], now_ms):
            return _refuse(401, f"missing, stale or invalid {AUTH_HEADER}"), None
        return None, mac

    async def middleware(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        try:
            refusal, mac = await self.check(request)
            if refusal is not None:
                self.refused += 1
                return refusal
            response = await handler(request)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            log.debug("hook client went away (%s: %s)", type(exc).__name__, exc)
            return _refuse(400, "client went away")
        except Exception as exc:
            if type(exc).__name__ in ("ClientConnectionResetError", "ClientPayloadError"):
                log.debug("hook client went away (%s)", type(exc).__name__)
                return _refuse(400, "client went away")
            raise
        if mac is None:  # a probe: nothing to prove
            return response
        body = response.body if isinstance(response.body, bytes) else b""
        response.headers[PROOF_HEADER] = answer_proof(self.token, mac, response.status, body)
        return response

    def aiohttp_middleware(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def guard(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
            return await self.middleware(request, handler)

        return guard


def faust_web_settings(settings: Settings, port: int, guard: EdgeGuard) -> dict[str, Any]:
    """The Faust app settings of the web server: bind, advertise, TLS, guard, no built-in routes."""
    url = advertised_url(settings, port)
    from yarl import URL

    return {
        "web_bind": settings.web_host,
        "web_host": URL(url).host or settings.web_host,
        "web_port": port,
        "canonical_url": url,
        "web_ssl_context": server_ssl_context(settings),
        "web_application_options": {"middlewares": [guard.aiohttp_middleware()]},
        # Faust's own views (router, tables, stats, graph, metrics) are not served; the guard would
        # refuse them anyway.
        "web_router_enabled": False, "web_tables_enabled": False, "web_graph_enabled": False,
        "web_stats_enabled": False, "web_metrics_enabled": False,
    }


# ----------------------------------------------------------------------------- registry


class Registration:
    """This worker's entry in the registry: written once serving, touched, removed on a clean exit."""

    def __init__(self, settings: Settings, url: str) -> None:
        base = state_base(settings_env(settings))
        self.path = registry.entry_path(base, settings.broker, settings.app_id, os.getpid())
        self.body = registry.entry_body(settings.broker, settings.app_id, url, os.getpid())
        self.written = False

    def write(self) -> None:
        private_dir(os.path.dirname(self.path))
        temp = f"{self.path}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, self.body)
        finally:
            os.close(fd)
        os.replace(temp, self.path)
        self.written = True

    def touch(self) -> None:
        try:
            os.utime(self.path)
        except FileNotFoundError:
            self.write()  # removed by hand or by a sweep: put it back

    def remove(self) -> None:
        if self.written:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.written = False
