"""The bearer credential of ``volunteer mcp --http``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.mcp.auth import CredentialError, bearer_matches, shared_hook_credential

SECRET = "0123456789abcdef-secret"


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    path.write_text("file-secret-0123456789\n")
    path.chmod(0o600)
    assert shared_hook_credential(str(path), {"VOLUNTEER_HOOK_TOKEN": SECRET}) == SECRET
    assert shared_hook_credential(str(path), {}) == "file-secret-0123456789"


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


def test_no_credential_says_what_to_set() -> None:
    with pytest.raises(CredentialError, match="VOLUNTEER_HOOK_TOKEN"):
        shared_hook_credential(None, {})
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
