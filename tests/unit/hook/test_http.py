"""The hook's HTTP client on real loopback sockets: it reads an answer up to its Content-Length
(not to the worker's close), and reaching a worker loads no module the start-up cuts left out
(docs/hooks.md, "Speed")."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipeline.hook.http import lookup_name, post_json, response_size

ROOT = Path(__file__).resolve().parents[3]


def test_lookup_name_gives_ascii_names_as_bytes() -> None:
    assert lookup_name("127.0.0.1") == b"127.0.0.1"
    assert lookup_name("worker-1.example") == b"worker-1.example"
    assert lookup_name("bücher.example") == "bücher.example"  # an international name keeps the IDNA codec


def test_response_size_from_the_head() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"
    assert response_size(head) == len(head) + 2
    assert response_size(head + b"{}") == len(head) + 2
    assert response_size(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n") is None  # head not complete yet
    assert response_size(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n") is None
    assert response_size(b"HTTP/1.1 200 OK\r\n\r\n") is None  # no length: read to the close
    assert response_size(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n") is None


def serve_once(answer: bytes, hold_s: float) -> tuple[socket.socket, int]:
    """A server that sends ``answer`` and keeps the connection open ``hold_s`` before closing it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(answer)
            time.sleep(hold_s)

    threading.Thread(target=run, daemon=True).start()
    return server, int(server.getsockname()[1])


def test_an_answer_is_complete_at_its_content_length_without_the_close() -> None:
    body = b'{"status":"ok"}'
    server, port = serve_once(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body, hold_s=3.0)
    with server:
        started = time.monotonic()
        assert post_json(f"http://127.0.0.1:{port}", "/x", {}, 5.0) == {"status": "ok"}
        assert time.monotonic() - started < 1.5  # not held until the server closes


def test_an_answer_without_a_length_is_read_to_the_close() -> None:
    server, port = serve_once(b'HTTP/1.1 200 OK\r\n\r\n{"status":"ok"}', hold_s=0.2)
    with server:
        assert post_json(f"http://127.0.0.1:{port}", "/x", {}, 5.0) == {"status": "ok"}


def test_reaching_a_worker_imports_neither_the_idna_codec_nor_re() -> None:
    """``getaddrinfo`` given a ``str`` loads ``encodings.idna`` (and with it ``re``, ``enum``,
    ``unicodedata``): ~16 ms of CPU per hook call. The hook's interpreter (``-I -S``) must not."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    with server:
        code = ("import sys; sys.path.append(sys.argv[1]); from pipeline.hook.http import connect_plain; "
                "connect_plain('127.0.0.1', int(sys.argv[2]), 5).close(); "
                "print(sorted(m for m in ('encodings.idna', 're', 'enum', 'unicodedata') if m in sys.modules))")
        out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(ROOT), str(server.getsockname()[1])],
                             capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
