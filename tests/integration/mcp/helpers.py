"""Talking to a real ``volunteer mcp`` process with the SDK's own client (stdio or streamable HTTP)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

ROOT = Path(__file__).resolve().parents[3]
CONFORMANCE = ROOT / "tests" / "fixtures" / "conformance"
SAMPLES = ROOT / "pipeline" / "samples"
VOLUNTEER = str(Path(sys.executable).with_name("volunteer"))
TOKEN = "test-token-0123456789abcdef"


def op_cases() -> list[dict[str, Any]]:
    with (CONFORMANCE / "cases-op.jsonl").open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def arguments(case: dict[str, Any]) -> dict[str, Any]:
    """The tool call for a case: the window verbatim plus its options, exactly as a --batch line."""
    return {"window": case["window"], **case["opts"]}


def expected(case: dict[str, Any]) -> dict[str, Any]:
    """What ``volunteer context --batch`` prints for the case (the post-snapshot display collapse on)."""
    exp = case.get("expect_post_snapshot", case["expect"])
    if "error" in exp:
        return exp
    return {"pages": exp["pages"], "count": len(exp["pages"]), "window_turns": exp["window_turns"]}


def ordered(obj: Any) -> str:
    """A JSON text that differs whenever a value, a key or the key order differs."""
    return json.dumps(obj, ensure_ascii=False)


def server_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update(extra)
    return env


@asynccontextmanager
async def stdio_session(args: list[str], env: dict[str, str] | None = None,
                        errlog: Any = None) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=VOLUNTEER, args=["mcp", *args], env=env or server_env(), cwd=str(ROOT))
    kwargs: dict[str, Any] = {} if errlog is None else {"errlog": errlog}
    async with stdio_client(params, **kwargs) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@contextmanager
def http_server(args: list[str], env: dict[str, str] | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``volunteer mcp --http 127.0.0.1:0 ...``; yields the URL it announced on stderr."""
    proc = subprocess.Popen([VOLUNTEER, "mcp", "--http", "127.0.0.1:0", *args], cwd=ROOT,
                            env=env or server_env(VOLUNTEER_HOOK_TOKEN=TOKEN),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        found = re.search(r"http://127\.0\.0\.1:\d+/mcp", line)
        assert found, f"no listening line: {line!r}"
        yield found.group(0), proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def http_session(url: str, token: str | None = TOKEN) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as client, \
            streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        yield session


def wait_for(predicate: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)
