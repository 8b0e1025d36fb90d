"""The agent edge's credential: a per-user secret, and the MACs that prove each side knows it.

Whoever can post to a worker's hook endpoint can read and steer what a model sees, so every
request and every answer is authenticated with one secret shared by the user's hooks and workers
(docs/security.md, "The agent edge"):

- **The secret.** ``VOLUNTEER_HOOK_TOKEN`` if set (deployments, workers on other hosts), else the
  file ``<state dir>/hook-token`` (0600, in a 0700 directory), created by whichever of the worker,
  ``volunteer up`` or ``volunteer bootstrap`` needs it first. Creation is race-safe: the secret is
  written to a private temporary file and hard-linked into place, so two processes starting at
  once end up with the same secret.
- **Requests** carry :data:`AUTH_HEADER` = ``v1.<ts ms>.<nonce>.<mac>``, a MAC over the method,
  path, timestamp, nonce and body digest. The secret itself never travels. The MAC is keyed
  BLAKE2b-256 (BLAKE2's own keyed mode, a MAC by design, like HMAC-SHA256 but in the interpreter's
  builtin ``_blake2``, so the hook does not load OpenSSL).
- **Answers** carry :data:`PROOF_HEADER`, a MAC over the request's MAC, the HTTP status and the
  answer's body: a process that squats on the port cannot produce it, so the hook prints nothing
  it sent. The hook's first request of a call is a body-free ``hello`` whose answer must carry a
  valid proof before the prompt is sent at all.
- **Proposals** get a nonce (a MAC over session and turn); a delivery record is accepted only
  with it, so nobody can mark pages "printed" that the worker never answered.

Light on purpose (the hook process imports it): ``_blake2``, ``_operator`` and ``os`` only.
"""

from __future__ import annotations

import os
import stat
from _operator import _compare_digest as compare_digest  # hmac.compare_digest, without importing hmac

try:  # the builtin module: hashlib (and hmac) would load OpenSSL's _hashlib, ~4 ms of the hook's start-up
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from collections.abc import Mapping

TOKEN_ENV = "VOLUNTEER_HOOK_TOKEN"
STATE_DIR_ENV = "VOLUNTEER_STATE_DIR"
TOKEN_FILE = "hook-token"
MIN_TOKEN_CHARS = 32
AUTH_HEADER = "X-Volunteer-Auth"
PROOF_HEADER = "X-Volunteer-Proof"
AUTH_VERSION = "v1"
MAX_CLOCK_SKEW_MS = 60_000
"""A request whose timestamp is further from the worker's clock is refused (bounds replays)."""


class CredentialError(RuntimeError):
    """The secret cannot be read or created safely; the message says what to fix (one line)."""


def state_base(env: Mapping[str, str]) -> str:
    """The per-user state directory: ``VOLUNTEER_STATE_DIR``, else ``$XDG_STATE_HOME/volunteer``,
    else ``~/.local/state/volunteer``. The hook's session state, the credential and the worker
    registry all live under it."""
    explicit = env.get(STATE_DIR_ENV, "").strip()
    if explicit:
        return explicit
    home = env.get("HOME") or os.path.expanduser("~")
    base = env.get("XDG_STATE_HOME", "").strip() or os.path.join(home, ".local", "state")
    return os.path.join(base, "volunteer")


def private_dir(path: str) -> str:
    """Create ``path`` (and parents) 0700; an existing one must be ours and not open to others."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise CredentialError(f"{path} must be a directory (not a symlink)")
    if info.st_uid != os.getuid():
        raise CredentialError(f"{path} belongs to another user; use a directory of your own (VOLUNTEER_STATE_DIR)")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _read_token_file(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            raise CredentialError(f"{path} must be a regular file of your own")
        if info.st_mode & 0o077:
            raise CredentialError(f"{path} is readable by other users; run: chmod 600 {path}")
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    token = data.decode("ascii", "replace").strip()
    if len(token) < MIN_TOKEN_CHARS:
        raise CredentialError(f"{path} holds no valid secret; delete it and restart the worker to make a new one")
    return token


def _create_token_file(path: str) -> None:
    """Write a fresh secret to ``path`` unless another process got there first (hard link = atomic)."""
    private_dir(os.path.dirname(path))
    temp = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, (os.urandom(32).hex() + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(temp, path)
    except FileExistsError:
        pass  # another process created it meanwhile: use theirs
    finally:
        os.unlink(temp)


def load_token(env: Mapping[str, str], *, create: bool) -> str | None:
    """The secret (``VOLUNTEER_HOOK_TOKEN`` wins); ``None`` if there is none and ``create`` is off."""
    override = env.get(TOKEN_ENV, "").strip()
    if override:
        if len(override) < MIN_TOKEN_CHARS:
            raise CredentialError(f"{TOKEN_ENV} must be at least {MIN_TOKEN_CHARS} characters")
        return override
    path = os.path.join(state_base(env), TOKEN_FILE)
    try:
        return _read_token_file(path)
    except FileNotFoundError:
        if not create:
            return None
    _create_token_file(path)
    return _read_token_file(path)


# ----------------------------------------------------------------------------- MACs


def _key(token: str) -> bytes:
    raw = token.encode("utf-8", "surrogatepass")
    return raw if len(raw) <= 64 else blake2b(raw, digest_size=64).digest()  # BLAKE2b keys are <= 64 bytes


def _mac(token: str, *parts: str) -> str:
    data = "\n".join(parts).encode("utf-8", "surrogatepass")
    return blake2b(data, key=_key(token), digest_size=32, person=b"volunteer-edge").hexdigest()


def body_digest(body: bytes) -> str:
    return blake2b(body, digest_size=32).hexdigest()


def sign_request(token: str, method: str, path: str, body: bytes, ts_ms: int, nonce: str) -> str:
    """The :data:`AUTH_HEADER` value of one request."""
    mac = _mac(token, "request", AUTH_VERSION, method.upper(), path, str(ts_ms), nonce, body_digest(body))
    return f"{AUTH_VERSION}.{ts_ms}.{nonce}.{mac}"


def new_nonce() -> str:
    return os.urandom(16).hex()


def parse_auth(value: str) -> tuple[int, str, str] | None:
    """``(ts_ms, nonce, mac)`` of an :data:`AUTH_HEADER` value, or ``None`` if malformed."""
    parts = value.strip().split(".")
    if len(parts) != 4 or parts[0] != AUTH_VERSION or not parts[1].isdigit() or len(parts[1]) > 15:
        return None
    if not 16 <= len(parts[2]) <= 64 or len(parts[3]) != 64:
        return None
    return int(parts[1]), parts[2], parts[3]


def request_is_signed(token: str, method: str, path: str, body: bytes, value: str, now_ms: int) -> str | None:
    """The request's MAC if ``value`` is a valid, fresh signature of it; else ``None``."""
    parsed = parse_auth(value)
    if parsed is None:
        return None
    ts_ms, nonce, mac = parsed
    if abs(now_ms - ts_ms) > MAX_CLOCK_SKEW_MS:
        return None
    expected = sign_request(token, method, path, body, ts_ms, nonce).rsplit(".", 1)[1]
    return mac if compare_digest(expected, mac) else None


def answer_proof(token: str, request_mac: str, status: int, body: bytes) -> str:
    """The :data:`PROOF_HEADER` of an answer to the request whose MAC is ``request_mac``."""
    return _mac(token, "answer", AUTH_VERSION, request_mac, str(status), body_digest(body))


def answer_is_proven(token: str, request_mac: str, status: int, body: bytes, proof: str) -> bool:
    return compare_digest(answer_proof(token, request_mac, status, body), proof.strip())


def proposal_nonce(token: str, session_id: str, turn: int) -> str:
    """What a delivery record of (session, turn) must carry: only the worker's answer told it."""
    return _mac(token, "proposal", AUTH_VERSION, session_id, str(turn))[:32]


def nonce_matches(token: str, session_id: str, turn: int, nonce: object) -> bool:
    return isinstance(nonce, str) and compare_digest(proposal_nonce(token, session_id, turn), nonce)


def ensure_token(env: Mapping[str, str]) -> str:
    """Where the secret is, creating the file if there is none (``volunteer up`` and ``bootstrap``
    call this so that a hook is ready before the first worker starts). Never returns the secret."""
    if env.get(TOKEN_ENV, "").strip():
        load_token(env, create=False)  # validates it
        return TOKEN_ENV
    load_token(env, create=True)
    return os.path.join(state_base(env), TOKEN_FILE)
