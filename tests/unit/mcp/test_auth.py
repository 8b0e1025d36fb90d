"""The bearer credential of ``volunteer mcp --http``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.hook.credential import derived_bearer, load_token
from pipeline.mcp.auth import CredentialError, bearer_matches, shared_hook_credential

SECRET = "0123456789abcdef-secret"
EDGE_TOKEN = "edge-token-0123456789abcdef-0123456789"


def test_a_token_file_is_a_dedicated_bearer(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text("file-secret-0123456789\n")
    path.chmod(0o600)
    assert shared_hook_credential(str(path), {"VOLUNTEER_HOOK_TOKEN": EDGE_TOKEN}) == "file-secret-0123456789"


def test_without_a_file_the_bearer_is_derived_from_the_edge_token_never_the_token_itself() -> None:
    bearer = shared_hook_credential(None, {"VOLUNTEER_HOOK_TOKEN": EDGE_TOKEN})
    assert bearer == derived_bearer(EDGE_TOKEN, "mcp")
    assert EDGE_TOKEN not in bearer and len(bearer) == 64
    assert bearer != derived_bearer(EDGE_TOKEN + "x", "mcp") and bearer != derived_bearer(EDGE_TOKEN, "other")


def test_without_any_credential_the_per_user_token_file_is_created_and_shared(tmp_path: Path) -> None:
    env = {"VOLUNTEER_STATE_DIR": str(tmp_path / "state")}
    first = shared_hook_credential(None, env)
    token = load_token(env, create=False)
    assert token is not None and first == derived_bearer(token, "mcp")
    assert shared_hook_credential(None, env) == first  # the same secret the worker and the hook use
    files = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o077 == 0 for p in files)


@pytest.mark.parametrize(("content", "mode", "message"), [
    (SECRET, 0o644, "chmod 600"),
    ("short", 0o600, "shorter than 16"),
    ("", 0o600, "shorter than 16"),
])
def test_bad_token_files_are_refused(tmp_path: Path, content: str, mode: int, message: str) -> None:
    path = tmp_path / "t"
    path.write_text(content)
    path.chmod(mode)
    with pytest.raises(CredentialError, match=message):
        shared_hook_credential(str(path), {})


def test_a_bad_credential_says_what_to_set() -> None:
    with pytest.raises(CredentialError, match="VOLUNTEER_HOOK_TOKEN"):
        shared_hook_credential(None, {"VOLUNTEER_HOOK_TOKEN": "too-short"})
    with pytest.raises(CredentialError, match="cannot read"):
        shared_hook_credential("/nonexistent/token", {})


@pytest.mark.parametrize(("header", "ok"), [
    (f"Bearer {SECRET}".encode(), True),
    (f"bearer  {SECRET} ".encode(), True),
    (f"Bearer {SECRET}x".encode(), False),
    (SECRET.encode(), False),
    (f"Basic {SECRET}".encode(), False),
    (b"", False),
    (None, False),
])
def test_bearer_header(header: bytes | None, ok: bool) -> None:
    assert bearer_matches(header, SECRET) is ok
