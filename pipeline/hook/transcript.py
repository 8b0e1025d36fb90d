"""Reading the harness's transcript: confined to its folder, bounded, and only what is new.

``transcript_path`` comes from the hook's stdin, so it is untrusted: it must be a regular
``.jsonl`` file (not a symlink) whose real path is inside the harness's transcript folder
(``~/.claude/projects`` or ``~/.codex/sessions``), and no bigger than :data:`HARD_CAP_BYTES`.
Reads are bounded: at most :data:`MAX_READ_BYTES` from the end, or from where the previous call
stopped. Only conversation text is kept (text blocks of user and assistant messages); tool calls,
tool results, thinking, attachments (including our own injected blocks) and sub-agent traffic
are skipped, so a 4-turn window holds conversation rather than placeholders.
"""

from __future__ import annotations

import os
import stat

from pipeline import jsonlite

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from typing import Any

MAX_READ_BYTES = 2 * 1024 * 1024
HARD_CAP_BYTES = 512 * 1024 * 1024


class TranscriptRefused(Exception):
    """The path is not one the hook may read; ``reason`` is a short code for the heartbeat."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _inside(path: str, root: str | os.PathLike[str]) -> str:
    try:
        real = os.path.realpath(path)
        real_root = os.path.realpath(root)
    except OSError:
        raise TranscriptRefused("transcript_unreadable") from None
    if real == real_root or not real.startswith(real_root.rstrip(os.sep) + os.sep):
        raise TranscriptRefused("transcript_outside_root")
    return real


def confine(path: Any, root: str | os.PathLike[str]) -> str | None:
    """The transcript path if it may be read, ``None`` if it is inside the folder but not written
    yet (a brand-new session), else :class:`TranscriptRefused`."""
    if not isinstance(path, str) or not path:
        raise TranscriptRefused("transcript_missing")
    if not path.endswith(".jsonl"):
        raise TranscriptRefused("transcript_not_jsonl")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _inside(path, root)
        return None
    except OSError:
        raise TranscriptRefused("transcript_unreadable") from None
    if stat.S_ISLNK(st.st_mode):
        raise TranscriptRefused("transcript_symlink")
    if not stat.S_ISREG(st.st_mode):
        raise TranscriptRefused("transcript_not_file")
    if st.st_size > HARD_CAP_BYTES:
        raise TranscriptRefused("transcript_too_large")
    return _inside(path, root)


class TranscriptChunk:
    __slots__ = ("end_offset", "file_id", "turns")

    def __init__(self, turns: list[tuple[str, str]], end_offset: int, file_id: str) -> None:
        self.turns = turns  # (role, text), oldest first
        self.end_offset = end_offset  # where the next read starts (the end of the last complete line)
        self.file_id = file_id  # device:inode, to notice a replaced file


def _file_id(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def read_new(path: str | os.PathLike[str], offset: int | None, file_id: str | None,
             harness: str) -> TranscriptChunk:
    """Turns written after ``offset`` (the whole bounded tail when ``offset`` is None, or when the
    file was replaced or truncated). Never reads more than :data:`MAX_READ_BYTES`."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        size = st.st_size
        fid = _file_id(st)
        start = 0 if offset is None or fid != file_id or offset > size else offset
        drop_first = False
        if size - start > MAX_READ_BYTES:
            start = size - MAX_READ_BYTES
            drop_first = True  # very likely a partial line
        fh.seek(start)
        data = fh.read(size - start)
    cut = data.rfind(b"\n") + 1  # an unfinished last line is read next time
    body = data[:cut]
    lines = body.split(b"\n")
    if drop_first and lines:
        lines = lines[1:]
    parse = parse_codex_line if harness == "codex" else parse_claude_line
    turns: list[tuple[str, str]] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            entry = jsonlite.loads(line)
        except (ValueError, RecursionError):
            continue
        turn = parse(entry)
        if turn is None:
            continue
        if turns and turns[-1][0] == turn[0] == "assistant":
            # One assistant reply is often written as several lines (one per content block).
            turns[-1] = ("assistant", turns[-1][1] + "\n" + turn[1])
        else:
            turns.append(turn)
    return TranscriptChunk(turns, start + cut, fid)


def _text_blocks(content: Any, kinds: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    parts = [b["text"] for b in content
             if isinstance(b, dict) and b.get("type") in kinds and isinstance(b.get("text"), str)]
    return "\n".join(p for p in parts if p.strip()).strip()


COMMAND_RECORD_PREFIXES = ("<command-name>", "<command-message>", "<command-args>", "<local-command-stdout>",
                           "<local-command-stderr>")
"""How Claude Code writes a slash command and its output into the transcript as user-role text."""


def parse_claude_line(entry: Any) -> tuple[str, str] | None:
    """A Claude Code transcript line -> (role, text), or None for anything but conversation text.

    Slash-command records (``<command-name>/clear</command-name>``, a local command's captured
    output) are user-role lines but not the user's words, so they are skipped, as gbrain's hooks
    do since 0.50.1."""
    if not isinstance(entry, dict) or entry.get("isSidechain") is True or entry.get("isMeta") is True:
        return None
    kind = entry.get("type")
    if kind not in ("user", "assistant"):
        return None
    message = entry.get("message")
    if not isinstance(message, dict):
        return None
    role = message.get("role") if message.get("role") in ("user", "assistant") else kind
    text = _text_blocks(message.get("content"), ("text",))
    if role == "user" and text.startswith(COMMAND_RECORD_PREFIXES):
        return None
    return (str(role), text) if text else None


def parse_codex_line(entry: Any) -> tuple[str, str] | None:
    """A Codex rollout line -> (role, text): typed user messages and assistant output text only
    (``response_item`` user/developer rows are injected context, not the user's words).

    The user's words come in two formats: Codex 0.169 writes an ``event_msg`` whose payload is
    ``item_completed`` with a ``UserMessage`` item (text parts in ``content``); earlier versions
    wrote an ``event_msg`` of type ``user_message`` with the text in ``message``. Both are read."""
    if not isinstance(entry, dict):
        return None
    payload = entry.get("payload")
    if not isinstance(payload, dict):
        return None
    if entry.get("type") == "event_msg":
        kind = payload.get("type")
        if kind == "item_completed":
            item = payload.get("item")
            if not isinstance(item, dict) or item.get("type") != "UserMessage":
                return None
            text = _text_blocks(item.get("content"), ("text", "input_text"))
            return ("user", text) if text else None
        if kind == "user_message":
            message = payload.get("message")
            return ("user", message.strip()) if isinstance(message, str) and message.strip() else None
        return None
    if (entry.get("type") == "response_item" and payload.get("type") == "message"
            and payload.get("role") == "assistant"):
        text = _text_blocks(payload.get("content"), ("output_text", "text"))
        return ("assistant", text) if text else None
    return None
