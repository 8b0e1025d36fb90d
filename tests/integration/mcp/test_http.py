"""``volunteer mcp --http``: the same calls over streamable HTTP, behind the bearer credential."""

from __future__ import annotations

import subprocess

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from pipeline.core.render import format_result
from tests.integration.mcp.helpers import (
    CONFORMANCE,
    TOKEN,
    VOLUNTEER,
    arguments,
    expected,
    http_server,
    http_session,
    op_cases,
    ordered,
    server_env,
)

pytestmark = pytest.mark.integration

BRAIN = ["--brain", str(CONFORMANCE / "brain"), "--no-log"]
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "t", "version": "1"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def test_every_conformance_op_case_over_http() -> None:
    cases = op_cases()
    mismatches: list[str] = []

    async def go(url: str) -> None:
        async with http_session(url) as session:
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["volunteer_context", "volunteer_stats", "volunteer_opened"]
            for case in cases:
                result = await session.call_tool("volunteer_context", arguments(case))
                want = expected(case)
                good = ordered(result.structured_content) == ordered(want) and result.is_error == ("error" in want)
                if not result.is_error:
                    good = good and result.content[0].text == format_result(want)
                if not good:
                    mismatches.append(case["id"])
            bad = await session.call_tool("volunteer_context", {"window": "  "})
            assert bad.is_error and bad.structured_content["message"] == "window is required unless stats: true"

    with http_server(BRAIN) as (url, _):
        anyio.run(go, url)
    assert mismatches == []


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token-0123456789", f"Basic {TOKEN}", f"Bearer {TOKEN}x"])
def test_missing_or_wrong_credential_is_refused(authorization: str | None) -> None:
    with http_server(BRAIN) as (url, _):
        headers = dict(HEADERS)
        if authorization is not None:
            headers["Authorization"] = authorization
        refused = httpx2.post(url, json=INITIALIZE, headers=headers, timeout=10)
        assert refused.status_code == 401
        assert "www-authenticate" in refused.headers
        accepted = httpx2.post(url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"},
                               timeout=10)
        assert accepted.status_code == 200


def test_sdk_client_without_the_credential_cannot_initialize() -> None:
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    async def go(url: str) -> None:
        async with httpx2.AsyncClient(event_hooks={"response": [record]}, timeout=10) as client, \
                streamable_http_client(url, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            raise AssertionError("initialized without a credential")

    with http_server(BRAIN) as (url, _), pytest.raises(BaseException) as info:
        anyio.run(go, url)
    assert "AssertionError" not in repr(info.value)
    assert statuses and set(statuses) == {401}


def test_http_without_a_credential_does_not_start() -> None:
    proc = subprocess.run([VOLUNTEER, "mcp", "--http", "127.0.0.1:0", *BRAIN], env=server_env(),
                          capture_output=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == b""
    err = proc.stderr.decode()
    assert err.count("\n") == 1 and "VOLUNTEER_HOOK_TOKEN" in err and "--token-file" in err


def test_token_file_must_be_private(tmp_path: pytest.TempPathFactory) -> None:
    path = tmp_path / "token"  # type: ignore[operator]
    path.write_text(TOKEN + "\n")
    path.chmod(0o644)
    proc = subprocess.run([VOLUNTEER, "mcp", "--http", "127.0.0.1:0", "--token-file", str(path), *BRAIN],
                          env=server_env(), capture_output=True, timeout=30)
    assert proc.returncode == 1 and "chmod 600" in proc.stderr.decode()
    path.chmod(0o600)
    with http_server(["--token-file", str(path), *BRAIN], env=server_env()) as (url, _):
        ok = httpx2.post(url, json=INITIALIZE, headers={**HEADERS, "Authorization": f"Bearer {TOKEN}"}, timeout=10)
        assert ok.status_code == 200


def test_a_window_near_the_limit_fits_and_one_over_it_is_invalid_params() -> None:
    near = "user: ping Ruth Merckx\n" + "assistant: " + "x" * 4_900_000
    over = "user: " + "y" * 5_000_001

    async def go(url: str) -> None:
        async with http_session(url) as session:
            ok = await session.call_tool("volunteer_context", {"window": near})
            assert not ok.is_error and ok.structured_content["window_turns"] == 2
            refused = await session.call_tool("volunteer_context", {"window": over})
            assert refused.is_error
            assert refused.structured_content == {"error": "invalid_params", "message": "window is over 5,000,000 bytes"}

    with http_server(BRAIN) as (url, _):
        anyio.run(go, url)
