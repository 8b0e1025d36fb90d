"""AES-GCM for the session table's values, so the changelog topic holds no conversation words.

The session state keeps the window as extracted entity candidates (words of the conversation).
The table's changelog is a Kafka topic that anyone allowed to read topics can read, so every
state is sealed before it is written and opened when it is read:

- the key is 32 bytes from ``VOLUNTEER_STATE_KEY`` (base64), else from a key file
  (``VOLUNTEER_STATE_KEY_FILE``, default ``~/.local/state/volunteer/state.key``) created 0600 in a
  0700 folder by the first worker that needs it. Every worker of one app id must use the same key
  (a worker that takes over a partition reads the states the previous owner wrote): workers on one
  host and user share the file; workers on several hosts or containers need ``VOLUNTEER_STATE_KEY``;
- the nonce is 12 bytes: 8 random bytes drawn once per process (and again after 2**32 seals) and a
  4-byte counter, so no nonce repeats within a process and across processes a repeat needs two
  8-byte draws to collide (NIST SP 800-38D's deterministic construction);
- the associated data is the session key and the value's plaintext header, so a sealed state
  cannot be moved to another session or given another offset unnoticed.

Only the session id (the record key) and the 19-byte header (partition, offset, last activity)
stay readable: the expiry sweep reads the header without the key.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import itertools
import os
import secrets
import struct
import threading
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
_PREFIX_BYTES = 8
_COUNTER_LIMIT = 2**32
_COUNT = struct.Struct(">I")


class StateKeyError(ValueError):
    """A state key that cannot be used (bad base64, wrong length, unreadable file); one line."""


class SealedStateError(ValueError):
    """A sealed value that does not open with this key (another key, or tampered with)."""


def parse_key(text: str, where: str = "VOLUNTEER_STATE_KEY") -> bytes:
    """32 bytes from base64 (standard or URL-safe, padding optional)."""
    raw = text.strip()
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=b"-_" if ("-" in raw or "_" in raw) else None,
                               validate=True)
    except (binascii.Error, ValueError):
        raise StateKeyError(f"{where} is not base64 (make one with: openssl rand -base64 32)") from None
    if len(key) != KEY_BYTES:
        raise StateKeyError(f"{where} holds {len(key)} bytes; an AES-256 key is {KEY_BYTES} (base64 of 32 random bytes)")
    return key


def new_key_text() -> str:
    """A fresh key as VOLUNTEER_STATE_KEY takes it."""
    return base64.urlsafe_b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


def default_key_file(env: dict[str, str] | None = None) -> Path:
    environ = os.environ if env is None else env
    base = environ.get("XDG_STATE_HOME", "").strip() or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                                     ".local", "state")
    return Path(base) / "volunteer" / "state.key"


def load_or_create_key_file(path: Path) -> bytes:
    """The key in ``path``; created (0600, in a 0700 folder) when absent, atomically, so two workers
    starting together end up with the same key."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(OSError):
            os.chmod(path.parent, 0o700)
        temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (new_key_text() + "\n").encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)  # fails if another worker was first: then its key is the key
        except FileExistsError:
            pass
        finally:
            temp.unlink()
    try:
        mode = path.stat().st_mode & 0o777
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise StateKeyError(f"cannot read the state key file {path}: {exc}") from None
    if mode & 0o077:
        raise StateKeyError(f"the state key file {path} is readable by others (mode {mode:o}); chmod 600 it")
    return parse_key(text, str(path))


class StateCipher:
    """Seal and open table values with one key (see the module docstring)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise StateKeyError(f"an AES-256 key is {KEY_BYTES} bytes, not {len(key)}")
        self._aead = AESGCM(key)
        self._lock = threading.Lock()  # only to draw a new prefix
        self._nonces = (secrets.token_bytes(_PREFIX_BYTES), itertools.count())

    def _nonce(self) -> bytes:
        """The next nonce, without a lock: a worker seals every state it saves (one per session of a
        batch), and the lock's acquire and release were a good part of the Python around AES-GCM.

        Each prefix has a counter of its own, read together from one tuple, and ``next`` on an
        ``itertools.count`` is atomic (C code that never releases the GIL), so every count below the
        limit is handed out once with its own prefix, whichever threads seal. The thread that reaches
        the limit draws the next prefix with a fresh counter, once (the lock, and the check that the
        counter is still the current one), and takes a nonce from it."""
        prefix, counter = self._nonces
        count = next(counter)
        if count < _COUNTER_LIMIT:
            return prefix + _COUNT.pack(count)
        with self._lock:
            if self._nonces[1] is counter:
                self._nonces = (secrets.token_bytes(_PREFIX_BYTES), itertools.count())
        return self._nonce()

    def seal(self, plaintext: bytes, associated: bytes) -> bytes:
        """``nonce || ciphertext || tag``."""
        nonce = self._nonce()
        return nonce + self._aead.encrypt(nonce, plaintext, associated)

    def open(self, sealed: bytes, associated: bytes) -> bytes:
        if len(sealed) < NONCE_BYTES + TAG_BYTES:
            raise SealedStateError(f"sealed value of {len(sealed)} bytes is too short")
        try:
            return self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated)
        except InvalidTag:
            raise SealedStateError(
                "it does not open with this worker's state key (workers of one app id must share "
                "VOLUNTEER_STATE_KEY or the key file)") from None


def cipher_from(key_text: str | None, key_file: str | None) -> StateCipher:
    """The worker's cipher: ``VOLUNTEER_STATE_KEY`` when set, else the key file (created if absent)."""
    if key_text:
        return StateCipher(parse_key(key_text))
    path = Path(key_file).expanduser() if key_file else default_key_file()
    return StateCipher(load_or_create_key_file(path))
