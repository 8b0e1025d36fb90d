"""``volunteer hook user-prompt``: a harness prompt in, the volunteered pages for it out, fast.

One call, all under the session's state lock:

1. read the harness's ``UserPromptSubmit`` JSON from stdin;
2. collect the turns to publish: on a session's first prompt the last few transcript turns (so
   the worker's window starts warm), later the replies written since the previous prompt, then
   the prompt itself; number them (numbers are reserved in the state file first);
3. POST them to the worker's answer endpoint, which publishes them on ``turns`` and answers with
   the pages the window agent proposed for the prompt's turn (or ``timeout``);
4. print the block (capped, lowest confidence dropped first) and then report exactly the printed
   pages as delivered; a report that fails is kept and sent with the next call.

Fail-open: whatever goes wrong (bad input, no worker, the deadline, a bug), nothing is printed,
the exit code is 0, and the heartbeat records why. The deadline counts from process start and is
enforced with an interval timer, so no blocking call can outlive it.
"""

from __future__ import annotations

# signal.py is _signal plus enum wrappers; enum (with functools and collections) is a few ms of start-up
import _signal
import os
import sys
import time

from pipeline import jsonlite
from pipeline.hook.block import fit
from pipeline.hook.config import HookConfig, hooks_enabled
from pipeline.hook.credential import CredentialError, load_token
from pipeline.hook.heartbeat import CallRecord, record_call
from pipeline.hook.http import Transport, WorkerUnavailable, post_json
from pipeline.hook.protocol import (
    DELIVERED_PATH,
    HELLO_PATH,
    MAX_DELIVERIES_PER_REQUEST,
    TURNS_PATH,
    BadReply,
    items_from_answer,
)
from pipeline.hook.registry import Ambiguous, urls_for
from pipeline.hook.session_file import SessionHookState, SessionStateFile, prompt_digest, sweep_old_sessions
from pipeline.hook.transcript import TranscriptRefused, confine, read_new
from topics.delivery import MAX_TURN_NUMBER

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import IO, Any

MAX_STDIN_BYTES = 8 * 1024 * 1024
RESPONSE_MARGIN_S = 0.03
"""Asked of the worker: answer this much before the hook's deadline (transfer, render, print)."""
FINISH_RESERVE_S = 0.03
"""The timer fires this much before the deadline, leaving time to record the heartbeat and exit."""
MAX_SESSION_ID_CHARS = 256
HELLO_TIMEOUT_S = 0.25
"""At most this long per candidate worker for the handshake, so a hung one leaves time for the next."""


class Deadline(BaseException):
    """Raised by the interval timer (a BaseException so no library ``except Exception`` eats it)."""


def process_started_monotonic() -> float:
    """When this process started, on the ``time.monotonic`` clock (Linux /proc; else now)."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        start_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_s
    except (OSError, ValueError, IndexError, AttributeError):
        return now
    return now - min(max(age, 0.0), 5.0)


class DeadlineTimer:
    """Raise :class:`Deadline` in this thread at monotonic ``deadline`` (``with``; ``disarm()`` early)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self._previous: Any = None

    @staticmethod
    def _fire(signum: int, frame: Any) -> None:
        raise Deadline()

    def disarm(self) -> None:
        _signal.setitimer(_signal.ITIMER_REAL, 0)

    def __enter__(self) -> DeadlineTimer:
        self._previous = _signal.signal(_signal.SIGALRM, self._fire)
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            self.__exit__()
            raise Deadline()
        _signal.setitimer(_signal.ITIMER_REAL, remaining)
        return self

    def __exit__(self, *exc: object) -> None:
        self.disarm()
        # None: a handler not set from Python (C code's); the default is the nearest we can restore
        _signal.signal(_signal.SIGALRM, _signal.SIG_DFL if self._previous is None else self._previous)


def read_stdin(stream: IO[bytes]) -> dict[str, Any] | None:
    if stream.isatty():
        sys.stderr.write("volunteer hook user-prompt reads the harness's hook JSON on stdin; "
                         "see 'volunteer bootstrap --help' to install it\n")
        return None
    data = stream.read(MAX_STDIN_BYTES + 1)
    if len(data) > MAX_STDIN_BYTES:
        return None
    try:
        obj = jsonlite.loads(data)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


class Call:
    """One hook call: its settings, deadline, outcome record and output sink."""

    def __init__(self, cfg: HookConfig, deadline: float, emit: Callable[[str], bool]) -> None:
        self.cfg = cfg
        self.deadline = deadline
        self.emit = emit
        self.record = CallRecord(cfg.channel)
        self.url = ""
        self.transport = Transport(None, cfg.cafile)
        self.pressure: Any = None  # a pipeline.hook.pressure.Decision when the notice is on and measured

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def degrade(self, reason: str) -> None:
        self.record.outcome = "degraded"
        self.record.reason = reason

    # ------------------------------------------------------------------ steps

    def run(self, payload: dict[str, Any]) -> None:
        session_id = payload.get("session_id")
        prompt = payload.get("prompt")
        if not isinstance(session_id, str) or not 0 < len(session_id) <= MAX_SESSION_ID_CHARS:
            return self.degrade("bad_session_id")
        if not isinstance(prompt, str) or not prompt.strip():
            self.record.outcome, self.record.reason = "nothing", "empty_prompt"
            return None
        if not self.connect():
            return None
        with SessionStateFile(self.cfg.state_dir, self.cfg.channel, session_id) as sf:
            if sf.state.is_new:
                sweep_old_sessions(self.cfg.state_dir)
            turns = self.new_turns(sf.state, payload.get("transcript_path"), prompt)
            if turns is None:
                return None
            if self.cfg.pressure:
                self.measure_pressure(sf.state, payload.get("transcript_path"))
            answer = self.publish(sf, session_id, turns, prompt)
            if answer is None:
                return None
            self.deliver(sf, session_id, answer)
        return None

    def connect(self) -> bool:
        """Find a worker that proves it holds the secret, before anything of the prompt is sent.

        Candidates: ``VOLUNTEER_HOOK_URL``, else the live workers of this stack in the registry
        (freshest first). Each gets a body-free signed ``hello``; the first whose answer carries a
        valid proof is used. A squatter on a worker's old port gets the hello only (no prompt,
        no secret) and cannot answer it, so nothing it sends is printed.
        """
        cfg = self.cfg
        try:
            token = load_token(cfg.env, create=False)
        except CredentialError:
            self.degrade("credential_unreadable")
            return False
        if token is None:
            self.degrade("no_credential")  # no worker ever ran for this user (it creates the secret)
            return False
        self.transport.token = token
        try:
            candidates = [cfg.url] if cfg.url else urls_for(cfg.state_base, cfg.env)
        except Ambiguous:
            self.degrade("ambiguous_stack")
            return False
        reason = "no_worker"
        for url in candidates:
            try:
                post_json(url, HELLO_PATH, {}, min(self.remaining(), HELLO_TIMEOUT_S), self.transport)
            except WorkerUnavailable as exc:
                reason = exc.reason
                continue
            self.url = url
            return True
        self.degrade(reason)
        return False

    def new_turns(self, state: SessionHookState, transcript_path: Any,
                  prompt: str) -> list[tuple[str, str]] | None:
        """Catch-up turns from the transcript (bounded) plus the prompt. A transcript the hook may not
        read skips the warm-up only (``record.warmup`` says why); the prompt is still sent."""
        catch_up: list[tuple[str, str]] = []
        # Transcript formats known: Claude Code's and Codex's (opencode sends the prompt alone).
        if transcript_path is not None and self.cfg.warm_turns > 0 and self.cfg.harness != "opencode":
            try:
                path = confine(transcript_path, self.cfg.transcript_root)
            except TranscriptRefused as exc:  # skip the warm-up only: the prompt still gets its pages
                self.record.warmup = exc.reason
                path = None
            if path is not None:
                chunk = read_new(path, state.offset, state.file_id, self.cfg.harness)
                ours = set(state.recent_prompts)
                ours.add(prompt_digest(prompt))
                catch_up = [t for t in chunk.turns if not (t[0] == "user" and prompt_digest(t[1]) in ours)]
                catch_up = catch_up[-self.cfg.warm_turns:]
                state.offset, state.file_id = chunk.end_offset, chunk.file_id
        state.remember_prompt(prompt)
        return [*catch_up, ("user", prompt)]

    def measure_pressure(self, state: SessionHookState, transcript_path: Any) -> None:
        """Decide the context-pressure notice for this prompt (pipeline.hook.pressure). Any failure
        leaves it out: the notice is never worth a prompt's pages."""
        from pipeline.hook.pressure import decide, measure, read_tail

        try:
            path = confine(transcript_path, self.cfg.transcript_root) if transcript_path is not None else None
        except TranscriptRefused:
            return
        text = read_tail(path) if path is not None else None
        measured = measure(text) if text else None
        if measured is None:
            return
        decision = decide(state.pressure, measured, self.cfg.pressure_ratio, self.cfg.pressure_window)
        state.pressure = decision.state  # saved with the numbers reserved next
        self.pressure = decision if decision.fire else None

    def publish(self, sf: SessionStateFile, session_id: str, turns: list[tuple[str, str]],
                prompt: str) -> dict[str, Any] | None:
        """Reserve numbers, POST, handle the answer; returns ``{"turn", "pages"}`` or None."""
        state = sf.state
        for attempt in range(2):
            if state.last_turn + len(turns) > MAX_TURN_NUMBER:
                state.last_turn = 0  # out of range: start again, the worker's answer renumbers us
            numbers = state.reserve(len(turns))
            sf.save()  # numbers are used up before anything is published
            pending = list(state.pending)[:MAX_DELIVERIES_PER_REQUEST]
            body = {
                "session_id": session_id,
                "channel": self.cfg.channel,
                "source_id": self.cfg.source_id,
                "ts": int(time.time() * 1000),
                "turns": [{"role": r, "text": t, "turn": n} for (r, t), n in zip(turns, numbers, strict=True)],
                "deliveries": pending,
                "wait_turn": numbers[-1],
                "wait_ms": max(0, int((self.remaining() - RESPONSE_MARGIN_S) * 1000)),
            }
            try:
                answer = post_json(self.url, TURNS_PATH, body, self.remaining(), self.transport)
            except WorkerUnavailable as exc:
                self.degrade(exc.reason)
                return None
            if pending:  # the worker published them before answering
                self.record.pages_reported += sum(len(p.get("slugs") or ()) for p in pending)
                state.pending = state.pending[len(pending):]
                sf.save()
            status = answer.get("status")
            last = answer.get("last_turn")
            if status == "duplicate" and attempt == 0:
                # The worker's session is ahead of our numbering (state file lost): catch up, retry once.
                if isinstance(last, int) and not isinstance(last, bool) and last > state.last_turn:
                    state.last_turn = last
                continue
            if status == "out_of_range" and attempt == 0:
                # Our numbering is far beyond the session's (a corrupted or foreign state file): renumber.
                if isinstance(last, int) and not isinstance(last, bool) and 0 <= last < MAX_TURN_NUMBER:
                    state.last_turn = last
                continue
            if status != "ok":
                self.degrade("deadline" if status == "timeout" else f"worker_{status}"[:40])
                return None
            return {"turn": numbers[-1], "pages": answer.get("pages"), "nonce": answer.get("nonce")}
        self.degrade("turn_resync")
        return None

    def deliver(self, sf: SessionStateFile, session_id: str, answer: dict[str, Any]) -> None:
        try:  # the whole reply is checked before anything is printed
            items = items_from_answer(answer.get("pages"))
        except BadReply as exc:
            return self.degrade(exc.reason)
        notice = self.pressure.text() if self.pressure is not None else None
        if not items and notice is None:
            self.record.outcome, self.record.reason = "nothing", self.record.warmup
            return
        output, printed = fit(items, self.cfg.max_chars, notice=notice)
        if output is None:
            return self.degrade("over_cap")
        if not self.emit(output):
            return self.degrade("deadline")
        if notice is not None:  # once per compaction segment: recorded only once it was printed
            sf.state.pressure = self.pressure.printed()
            sf.save()
            self.record.reason = "pressure_notice"
        if not printed:
            self.record.outcome = "ok"
            return
        self.record.outcome = "ok"
        if len(printed) < len(items):
            self.record.reason = "trimmed"
        elif notice is None:
            self.record.reason = self.record.warmup
        self.record.pages_printed = len(printed)
        # imported after the output: the fast path up to it loads no record module
        from topics.delivery import Delivery

        delivery = Delivery(session_id, int(answer["turn"]), tuple(dict.fromkeys(p["slug"] for p in printed)),
                            self.cfg.channel, int(time.time() * 1000))
        report = delivery.to_obj()
        report["nonce"] = answer.get("nonce")  # the worker accepts a delivery only with its proposal's nonce
        try:
            post_json(self.url, DELIVERED_PATH, report, self.remaining(), self.transport)
        except (WorkerUnavailable, Deadline):
            sf.state.pending.append(report)  # sent with the next call of this session
            sf.save()
            return
        self.record.pages_reported += len(delivery.slugs)


def run(harness: str, stdin: IO[bytes] | None = None, stdout_fd: int = 1,
        env: Mapping[str, str] | None = None, started: float | None = None) -> int:
    """The whole hook; always returns 0."""
    env = os.environ if env is None else env
    if not hooks_enabled(env):
        return 0
    started = process_started_monotonic() if started is None else started
    cfg = HookConfig.from_env(harness, env)
    deadline = started + cfg.deadline_ms / 1000
    printed = False
    disarm_box: list[Callable[[], None]] = []

    def emit(output: str) -> bool:
        nonlocal printed
        if disarm_box:
            disarm_box[0]()
        if time.monotonic() >= deadline:
            return False
        data = output.encode("utf-8")
        while data:
            data = data[os.write(stdout_fd, data):]
        printed = True
        try:  # end the harness's read now; the report follows
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stdout_fd)
            os.close(devnull)
        except OSError:
            pass
        return True

    call = Call(cfg, deadline, emit)
    try:
        with DeadlineTimer(deadline - FINISH_RESERVE_S) as timer:
            disarm_box.append(timer.disarm)
            payload = read_stdin(stdin if stdin is not None else sys.stdin.buffer)
            if payload is None:
                call.degrade("bad_input")
            else:
                call.run(payload)
    except Deadline:
        if not printed:
            call.degrade("deadline")
    except Exception as exc:  # fail open, whatever it was
        call.record.outcome = "error"
        call.record.reason = f"exception:{type(exc).__name__}"[:48]
    call.record.duration_ms = (time.monotonic() - started) * 1000
    record_call(cfg.state_dir, call.record)
    return 0
