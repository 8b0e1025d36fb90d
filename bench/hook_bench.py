"""Latency of ``volunteer hook user-prompt`` against a warm worker: process start to output.

    python bench/hook_bench.py                      # embedded broker + PostgreSQL, 200 prompts
    python bench/hook_bench.py --prompts 500 --sessions 50
    python bench/hook_bench.py --url http://127.0.0.1:6066   # a worker you already run

Starts embedded services and one worker (sample brain, web server on), warms it up, then runs the
hook the way a harness does: the ``volunteer`` console script as a fresh process, the
``UserPromptSubmit`` JSON on stdin. Prompts cycle through sessions, so most are a session's 2nd+
prompt and some its first (with a transcript to warm the window from). For each call it records
the time from spawn to the end of stdout (the harness has the output then; the hook closes stdout
right after printing) and to process exit (which includes reporting the delivery). It also times
the floor: an interpreter that does nothing, and the hook with its kill switch on (start-up and
imports only), a worker that never answers (how long the hook can block), and the worker's own
part (publish, window agent, answer) from a client inside this process. Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PROMPTS = [
    "Did Alice Example reply about the Kiteline round?",
    "Can Saoirse Byrne look at our pricing before Friday?",
    "Swami wants a design review of Project Atlas.",
    "what did she say about it?",
    "Did Galewright ever reply to the intro?",
    "Let us ask Northwind about the follow-on.",
    "ok, and the board deck?",
    "田中さんに連絡しましたか？",
]


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def summary(name: str, values: list[float]) -> str:
    return (f"{name:<34} n={len(values):<4} median {statistics.median(values):6.1f} ms   p90 {pct(values, 90):6.1f}"
            f"   p99 {pct(values, 99):6.1f}   max {max(values):6.1f}")


def cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def run_once(command: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, float, bytes]:
    """(ms to end of stdout, ms to exit, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env=env)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin)
    proc.stdin.close()
    out = b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    while True:
        sel.select(30)
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        out += chunk
    output_ms = (time.perf_counter() - start) * 1000
    proc.wait(30)
    exit_ms = (time.perf_counter() - start) * 1000
    proc.stdout.close()
    return output_ms, exit_ms, out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_worker(broker: str, database: str, data: Path, log_path: Path,
                 state: Path) -> tuple[subprocess.Popen[bytes], str]:
    from pipeline.agents.answers import HOOK_ENDPOINT_MARK
    from pipeline.agents.wiring import READY_MARK

    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update({"VOLUNTEER_BROKER": broker, "VOLUNTEER_DATABASE_URL": database, "VOLUNTEER_DATA_DIR": str(data),
                "VOLUNTEER_APP_ID": "hook-bench", "VOLUNTEER_METRICS_PORT": "0", "PYTHONUNBUFFERED": "1",
                "VOLUNTEER_STATE_DIR": str(state)})  # the credential and the registry, shared with the hooks
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline", "worker", "--brain",
                                 str(ROOT / "pipeline" / "samples" / "brain"), "--web-port", str(free_port())],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        text = log_path.read_text(errors="replace")
        if READY_MARK in text and HOOK_ENDPOINT_MARK in text:
            found = re.search(re.escape(HOOK_ENDPOINT_MARK) + r" (http://[^/\s]+)/", text)
            assert found
            return proc, found.group(1)
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("worker did not start:\n" + text[-3000:])
        time.sleep(0.05)


def credential_cost(token: str, rounds: int = 2000) -> list[float]:
    """Microseconds of the hook's share of the credential per call: sign the hello and the turns
    request, check both proofs (four HMAC-SHA256 over the bodies), in this process."""
    from pipeline.hook.credential import answer_is_proven, answer_proof, new_nonce, sign_request

    body = orjson.dumps({"session_id": "s", "turns": [{"role": "user", "text": PROMPTS[0] * 20, "turn": 1}]})
    answer = b'{"status":"ok","pages":[' + b'{"slug":"people/alice-example"},' * 3 + b"]}"
    costs = []
    for _ in range(rounds):
        start = time.perf_counter()
        for data in (b"{}", body):
            mac = sign_request(token, "POST", "/volunteer/hook/turns", data, 1, new_nonce()).rsplit(".", 1)[1]
            proof = answer_proof(token, mac, 200, answer)
            assert answer_is_proven(token, mac, 200, answer, proof)
        costs.append((time.perf_counter() - start) * 1e6)
    return costs


def silent_server() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return sock, int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=200, help="hook calls measured (default 200)")
    parser.add_argument("--sessions", type=int, default=40, help="sessions they are spread over (default 40)")
    parser.add_argument("--warmup", type=int, default=10, help="calls before measuring (default 10)")
    parser.add_argument("--url", default=None, help="use this worker instead of starting one (your state directory's "
                                                    "credential, or VOLUNTEER_HOOK_TOKEN)")
    args = parser.parse_args()

    volunteer = shutil.which("volunteer", path=str(Path(sys.executable).parent)) or shutil.which("volunteer")
    command = [volunteer, "hook", "user-prompt"] if volunteer else [sys.executable, "-m", "pipeline", "hook",
                                                                    "user-prompt"]
    tmp = Path(tempfile.mkdtemp(prefix="hook-bench-"))
    services = worker = None
    try:
        url = args.url
        if url is None:
            from pipeline.cli.up_cmd import EmbeddedServices

            services = EmbeddedServices().start()
            worker, url = start_worker(services.broker_url, services.database_url, tmp / "data",
                                       tmp / "worker.log", tmp / "volunteer-state")
        home = tmp / "home"
        projects = home / ".claude" / "projects" / "bench"
        projects.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_") or k == "VOLUNTEER_HOOK_TOKEN"}
        env.update({"HOME": str(home), "VOLUNTEER_HOOK_URL": url, "VOLUNTEER_HOOK_STATE_DIR": str(tmp / "state")})
        if args.url is None:
            env["VOLUNTEER_STATE_DIR"] = str(tmp / "volunteer-state")
        else:
            from pipeline.hook.credential import state_base

            env["VOLUNTEER_STATE_DIR"] = state_base(os.environ)

        def payload(i: int, prefix: str) -> bytes:
            sid = f"{prefix}-{i % args.sessions}"
            transcript = projects / f"{sid}.jsonl"
            if not transcript.exists():
                transcript.write_bytes(orjson.dumps({"type": "assistant", "message": {
                    "role": "assistant", "content": [{"type": "text", "text": "Alice Example led one last year."}]}})
                    + b"\n")
            return orjson.dumps({"session_id": sid, "transcript_path": str(transcript), "cwd": str(home),
                                 "hook_event_name": "UserPromptSubmit",
                                 "prompt": PROMPTS[(i + i // args.sessions) % len(PROMPTS)]})

        print(f"hook command: {' '.join(command)}; worker {url}; load average {os.getloadavg()[0]:.2f} "
              f"on {os.cpu_count()} cores", flush=True)
        for i in range(args.warmup):
            run_once(command, payload(i, "warm"), env)

        floor = [run_once([sys.executable, "-c", "pass"], b"", env)[1] for _ in range(20)]
        killed = [run_once(command, payload(0, "off"), {**env, "VOLUNTEER_HOOKS": "0"})[1] for _ in range(20)]

        outputs, exits, cpu, printed = [], [], [], 0
        for i in range(args.prompts):
            before = cpu_ms()
            output_ms, exit_ms, out = run_once(command, payload(i, "bench"), env)
            cpu.append(cpu_ms() - before)
            outputs.append(output_ms)
            exits.append(exit_ms)
            printed += bool(out)
        beat = orjson.loads((tmp / "state" / "heartbeat.json").read_bytes())["channels"]["claude-code"]
        outcomes = Counter(r[3] or r[2] for r in beat["recent"])
        discovered: list[float] = []  # no VOLUNTEER_HOOK_URL: the worker comes from the registry
        if args.url is None:
            registry_env = {k: v for k, v in env.items() if k != "VOLUNTEER_HOOK_URL"}
            registry_env["VOLUNTEER_APP_ID"] = "hook-bench"
            discovered = [run_once(command, payload(i, "found"), registry_env)[0] for i in range(50)]

        from pipeline.hook.credential import load_token
        from pipeline.hook.http import Transport, post_json

        transport = Transport(load_token(env, create=False))
        credential_us = credential_cost(transport.token or "")
        round_trips = []
        for i in range(100):
            body = {"session_id": f"rt-{i}", "channel": "claude-code", "wait_turn": 1, "wait_ms": 5000,
                    "turns": [{"role": "user", "text": PROMPTS[i % len(PROMPTS)], "turn": 1}]}
            start = time.perf_counter()
            assert post_json(url, "/volunteer/hook/turns", body, 10, transport)["status"] == "ok"
            round_trips.append((time.perf_counter() - start) * 1000)

        sock, port = silent_server()
        stuck = [run_once(command, payload(i, "stuck"), {**env, "VOLUNTEER_HOOK_URL": f"http://127.0.0.1:{port}"})[1]
                 for i in range(10)]
        sock.close()

        print(summary("python -c pass (floor)", floor))
        print(summary("hook, kill switch on (start-up)", killed))
        print(summary("hook: spawn -> output", outputs))
        print(summary("hook: spawn -> exit", exits))
        print(summary("hook: CPU time per call", cpu))
        print(summary("hook, worker never answers: exit", stuck))
        print(summary("worker alone: POST -> answer", round_trips))
        if discovered:
            print(summary("hook via the registry: -> output", discovered))
        print(f"{'credential, hook side (in-process)':<34} n={len(credential_us):<4} median "
              f"{statistics.median(credential_us):6.1f} us   p99 {pct(credential_us, 99):6.1f} us")
        print(f"{printed} of {args.prompts} calls printed pages; outcomes of the last {len(beat['recent'])}: "
              f"{dict(outcomes)}; load average now {os.getloadavg()[0]:.2f}")
    finally:
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        if services is not None:
            services.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
