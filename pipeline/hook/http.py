"""A tiny JSON-over-HTTP/1.1 client for the hook, straight on a socket.

Not ``http.client``: it imports the ``email`` package (~10 ms of a ~100 ms process), and the hook
needs one request to a known local endpoint: ``POST`` with ``Connection: close``, read until
``Content-Length`` bytes came (or to EOF: chunked bodies, no length). Every step is bounded by the caller's remaining time.

Not even ``socket.py`` for plain ``http://``: it wraps ``_socket`` in ``enum`` classes and loads
``selectors``, a few ms the hook would pay on every prompt for nothing; the C module has the
calls used here (``getaddrinfo``, ``connect``, ``sendall``, ``recv``, timeouts). ``https://``
(workers on other hosts) needs ``ssl``, which wraps a ``socket.socket``, so that path imports both.
"""

from __future__ import annotations

import _socket
import time

from pipeline import jsonlite
from pipeline.hook.credential import AUTH_HEADER, PROOF_HEADER, answer_is_proven, new_nonce, sign_request
from pipeline.hook.protocol import dumps

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from socket import socket
    from typing import Any

MAX_RESPONSE_BYTES = 8 * 1024 * 1024


class WorkerUnavailable(Exception):
    """No worker answered (refused, reset, timed out, or not our endpoint); ``reason`` is a code."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def split_url(base_url: str) -> tuple[str, int, str]:
    """``http[s]://host:port/prefix`` -> (host, port, prefix); raises :class:`WorkerUnavailable`."""
    rest = base_url.strip()
    default_port = "443" if rest.startswith("https://") else "80"
    if rest.startswith("http://"):
        rest = rest[7:]
    elif rest.startswith("https://"):
        rest = rest[8:]
    elif "://" in rest:
        raise WorkerUnavailable("bad_url", base_url)
    hostport, _, prefix = rest.partition("/")
    if hostport.startswith("["):  # [IPv6]:port
        host, _, after = hostport[1:].partition("]")
        port_text = after[1:] if after.startswith(":") else default_port
    else:
        host, colon, port_text = hostport.partition(":")
        port_text = port_text if colon else default_port
    try:
        port = int(port_text)
    except ValueError:
        raise WorkerUnavailable("bad_url", base_url) from None
    if not host or not 0 < port < 65536:
        raise WorkerUnavailable("bad_url", base_url)
    return host, port, ("/" + prefix.strip("/")) if prefix.strip("/") else ""


def _dechunk(body: bytes) -> bytes:
    out, pos = bytearray(), 0
    while True:
        end = body.index(b"\r\n", pos)
        size = int(body[pos:end].split(b";", 1)[0], 16)
        if size == 0:
            return bytes(out)
        out += body[end + 2:end + 2 + size]
        pos = end + 2 + size + 2


def response_headers(lines: list[bytes]) -> dict[bytes, bytes]:
    return {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines[1:])}


def parse_response(raw: bytes) -> tuple[int, bytes]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise WorkerUnavailable("worker_io", "incomplete response")
    lines = head.split(b"\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise WorkerUnavailable("not_a_worker", "no HTTP status line") from None
    headers = response_headers(lines)
    try:
        if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            body = _dechunk(body)
        elif b"content-length" in headers:
            length = int(headers[b"content-length"])
            if len(body) < length:
                raise WorkerUnavailable("worker_io", "truncated body")
            body = body[:length]
    except (ValueError, IndexError):
        raise WorkerUnavailable("worker_io", "malformed body") from None
    return status, body


def response_size(raw: bytes) -> int | None:
    """The size of the whole response that starts with ``raw``, when its head is complete and
    gives a ``Content-Length`` (not chunked); None: read on to the end of the connection.

    The request asks ``Connection: close``, but the worker closes its side only after its event
    loop comes round to it, up to a few milliseconds after the answer was sent (seen with
    ``strace`` on the ``hello``): a response whose length is known is complete without that."""
    head, sep, _ = raw.partition(b"\r\n\r\n")
    if not sep:
        return None
    headers = response_headers(head.split(b"\r\n"))
    length = headers.get(b"content-length")
    if length is None or b"transfer-encoding" in headers:
        return None
    try:
        size = int(length)
    except ValueError:
        return None
    return len(head) + len(sep) + size if size >= 0 else None


class Transport:
    """How the hook reaches workers: the shared secret, and the TLS context for ``https://`` URLs."""

    __slots__ = ("_ssl", "cafile", "token")

    def __init__(self, token: str | None, cafile: str | None = None) -> None:
        self.token = token
        self.cafile = cafile
        self._ssl: Any = None

    def connect_tls(self, host: str, port: int, timeout_s: float) -> socket:
        """A verified TLS connection (``ssl`` and ``socket`` are imported only for this)."""
        import socket as socket_module

        if self._ssl is None:
            import ssl  # only for workers on other hosts: ~10 ms the loopback path does not pay

            self._ssl = ssl.create_default_context(cafile=self.cafile or None)
        raw = socket_module.create_connection((host, port), timeout=timeout_s)
        try:
            wrapped: socket = self._ssl.wrap_socket(raw, server_hostname=host)
        except BaseException:
            raw.close()
            raise
        return wrapped


def lookup_name(host: str) -> str | bytes:
    """The host as ``getaddrinfo`` should get it: bytes when it is ASCII.

    Given a ``str``, ``_socket.getaddrinfo`` always encodes it with the ``idna`` codec, and the
    first use of that codec imports ``encodings.idna``, ``stringprep``, ``unicodedata`` and ``re``
    (with ``enum``, ``functools``, ``collections``): ~16 ms of CPU, almost half of a whole hook
    call, to encode ``127.0.0.1``. An ASCII name is its own IDNA form, so it goes as bytes; only
    a non-ASCII (international) name still takes the codec.
    """
    try:
        return host.encode("ascii")
    except UnicodeEncodeError:
        return host


def connect_plain(host: str, port: int, timeout_s: float) -> _socket.socket:
    """``socket.create_connection`` on the C module: each address in turn, the last error raised."""
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(lookup_name(host), port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout_s)
            sock.connect(address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:  # the deadline timer
            sock.close()
            raise
        return sock
    raise error if error is not None else OSError(f"getaddrinfo returned nothing for {host}")


def _exchange(base_url: str, request: bytes, deadline: float, transport: Transport | None) -> bytes:
    host, port, _ = split_url(base_url)
    chunks: list[bytes] = []
    try:
        timeout_s = max(0.001, deadline - time.monotonic())
        if base_url.startswith("https://"):
            sock: socket | _socket.socket = (transport or Transport(None)).connect_tls(host, port, timeout_s)
        else:
            sock = connect_plain(host, port, timeout_s)
        try:
            sock.sendall(request)
            received = 0
            expected: int | None = None  # the whole response's size, once its head says it
            while expected is None or received < expected:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError
                sock.settimeout(remaining)
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                received += len(chunk)
                if received > MAX_RESPONSE_BYTES:
                    raise WorkerUnavailable("worker_io", "response too large")
                if expected is None:
                    expected = response_size(b"".join(chunks) if len(chunks) > 1 else chunk)
        finally:
            sock.close()
    except TimeoutError:
        raise WorkerUnavailable("deadline") from None
    except ConnectionRefusedError:
        raise WorkerUnavailable("no_worker") from None
    except OSError as exc:
        if type(exc).__name__.startswith("SSL"):
            raise WorkerUnavailable("tls_refused", type(exc).__name__) from None
        raise WorkerUnavailable("worker_io", type(exc).__name__) from None
    return b"".join(chunks)


def post_json(base_url: str, path: str, body: dict[str, Any], timeout_s: float,
              transport: Transport | None = None) -> dict[str, Any]:
    """POST ``body`` and return the decoded JSON object; any failure is :class:`WorkerUnavailable`.

    With a secret (``transport.token``) the request is signed and the answer must carry the
    worker's proof (:mod:`pipeline.hook.credential`); an answer without a valid proof is
    ``unauthenticated_worker`` and none of it is used.
    """
    deadline = time.monotonic() + timeout_s
    if timeout_s <= 0:
        raise WorkerUnavailable("deadline")
    host, port, prefix = split_url(base_url)
    data = dumps(body).encode("utf-8", "surrogatepass")
    token = transport.token if transport is not None else None
    auth, request_mac = "", ""
    if token:
        auth = sign_request(token, "POST", prefix + path, data, int(time.time() * 1000), new_nonce())
        request_mac = auth.rsplit(".", 1)[1]
        auth = f"{AUTH_HEADER}: {auth}\r\n"
    request = (f"POST {prefix}{path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"{auth}Content-Length: {len(data)}\r\nConnection: close\r\n\r\n").encode("ascii") + data
    raw = _exchange(base_url, request, deadline, transport)
    status, payload = parse_response(raw)
    if token:
        head = raw.partition(b"\r\n\r\n")[0].split(b"\r\n")
        proof = response_headers(head).get(PROOF_HEADER.lower().encode("ascii"), b"").decode("ascii", "replace")
        if not proof or not answer_is_proven(token, request_mac, status, payload, proof):
            raise WorkerUnavailable("unauthenticated_worker", f"HTTP {status}")
    try:
        obj = jsonlite.loads(payload)
    except (ValueError, RecursionError):
        raise WorkerUnavailable("not_a_worker", f"HTTP {status}") from None
    if not isinstance(obj, dict):
        raise WorkerUnavailable("not_a_worker", f"HTTP {status}")
    if status >= 400:
        if status == 409 and obj.get("status") == "out_of_range":
            return obj  # the caller renumbers
        raise WorkerUnavailable(f"http_{status}", str(obj.get("error", ""))[:80])
    return obj
