"""Latency of a ``volunteer_context`` call on a warm ``volunteer mcp`` over stdio.

    .venv/bin/python -m bench.mcp_bench                 # conformance brain, 3 timed passes of 450 calls
    .venv/bin/python -m bench.mcp_bench --passes 1 --database-url postgresql://...   # with op logging on

One server process (``--brain tests/fixtures/conformance/brain``) answers every conformance op
case: one untimed pass warms it, then each call is timed from request to parsed answer, two ways:

- ``sdk``: the MCP SDK's own ``ClientSession.call_tool`` (what an SDK-based agent pays, including
  the client's validation of the result against the tool's output schema);
- ``raw``: one JSON-RPC line written to the server's stdin, one line read back (the server alone:
  parse, decide, render, serialise).

Prints p50 / p90 / p99 / max per way; asserts nothing. Target: p99 ≤ 20 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CONFORMANCE = ROOT / "tests" / "fixtures" / "conformance"
VOLUNTEER = str(Path(sys.executable).with_name("volunteer"))
TARGET_P99_MS = 20.0


def requests() -> list[dict[str, Any]]:
    with (CONFORMANCE / "cases-op.jsonl").open(encoding="utf-8") as fh:
        cases = [json.loads(line) for line in fh if line.strip()]
    return [{"window": c["window"], **c["opts"], "session_id": c["session_id"], "turn": 1} for c in cases]


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"calls": len(ordered), "p50_ms": at(0.50), "p90_ms": at(0.90), "p99_ms": at(0.99),
            "max_ms": ordered[-1], "mean_ms": statistics.fmean(ordered)}


def server_args(database_url: str | None) -> list[str]:
    args = ["mcp", "--brain", str(CONFORMANCE / "brain")]
    return [*args, "--database-url", database_url] if database_url else [*args, "--no-log"]


async def _sdk(reqs: list[dict[str, Any]], passes: int, database_url: str | None) -> list[float]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=VOLUNTEER, args=server_args(database_url), cwd=str(ROOT))
    samples: list[float] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        for req in reqs:  # warm-up pass (memo caches, the client's compiled validator)
            await session.call_tool("volunteer_context", req)
        for _ in range(passes):
            for req in reqs:
                t0 = time.perf_counter()
                await session.call_tool("volunteer_context", req)
                samples.append((time.perf_counter() - t0) * 1000)
    return samples


def _raw(reqs: list[dict[str, Any]], passes: int, database_url: str | None) -> list[float]:
    proc = subprocess.Popen([VOLUNTEER, *server_args(database_url)], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    ident = 0

    def rpc(method: str, params: dict[str, Any], notify: bool = False) -> Any:
        nonlocal ident
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if not notify:
            ident += 1
            msg["id"] = ident
        proc.stdin.write(json.dumps(msg).encode() + b"\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        if notify:
            return None
        return json.loads(proc.stdout.readline())  # type: ignore[union-attr]

    try:
        rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "bench", "version": "1"}})
        rpc("notifications/initialized", {}, notify=True)
        for req in reqs:
            rpc("tools/call", {"name": "volunteer_context", "arguments": req})
        samples = []
        for _ in range(passes):
            for req in reqs:
                t0 = time.perf_counter()
                answer = rpc("tools/call", {"name": "volunteer_context", "arguments": req})
                samples.append((time.perf_counter() - t0) * 1000)
                assert "result" in answer, answer
        return samples
    finally:
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def measure(passes: int = 3, database_url: str | None = None) -> dict[str, Any]:
    reqs = requests()
    return {
        "sdk": percentiles(anyio.run(_sdk, reqs, passes, database_url)),
        "raw": percentiles(_raw(reqs, passes, database_url)),
        "logging": database_url is not None,
        "target_p99_ms": TARGET_P99_MS,
        "load": __import__("os").getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--passes", type=int, default=3, help="timed passes over the 450 cases")
    parser.add_argument("--database-url", default=None, help="log op events there (default: logging off)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    r = measure(args.passes, args.database_url)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(f"volunteer_context over stdio, warm server, conformance brain, logging {'on' if r['logging'] else 'off'}, "
          f"load {r['load']:.2f}")
    for way in ("sdk", "raw"):
        f = r[way]
        verdict = "met" if f["p99_ms"] <= TARGET_P99_MS else "MISSED"
        print(f"  {way:3s}: {f['calls']} calls  p50 {f['p50_ms']:.2f} ms  p90 {f['p90_ms']:.2f} ms  "
              f"p99 {f['p99_ms']:.2f} ms  max {f['max_ms']:.2f} ms  (target p99 ≤ {TARGET_P99_MS:.0f} ms: {verdict})")


if __name__ == "__main__":
    main()
