"""``volunteer feed``: conversation lines on stdin -> Turn records on the ``turns`` topic."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO

import click

from pipeline.cli.options import broker_option, quiet_client_logs, settings_with_flags
from pipeline.settings import Settings
from topics.records import InvalidRecord, Turn, decode_turn


def turns_from_lines(lines: Iterable[str], session: str, *, first_turn: int | None, channel: str | None,
                     source: str | None, now_ms: int) -> Iterator[Turn]:
    """``role: text`` lines -> Turn records, read like gbrain ``watch`` reads its input.

    Without ``first_turn`` the records carry no turn number, so the worker numbers them after the
    session's last turn: a second ``feed`` of the same session continues it instead of restarting at
    1, where every number would be a repeat the worker ignores (turns lost without a word). The
    worker recognises a redelivered record by its offset, so unnumbered turns are as crash-safe as
    numbered ones. With ``first_turn`` the numbers are explicit, from that one on.
    """
    from pipeline.core.window import parse_watch_line

    number = first_turn
    for line in lines:
        parsed = parse_watch_line(line.rstrip("\n"))
        if parsed is None:
            continue
        role, text = parsed
        yield Turn(session, role, text, turn=number, ts_ms=now_ms, source_id=source, channel=channel)
        if number is not None:
            number += 1


def turns_from_records(stream: IO[bytes], max_text_bytes: int) -> Iterator[Turn]:
    """Turn records (JSON lines) -> validated Turns; a bad line is a one-line error with its number."""
    for lineno, raw in enumerate(stream, start=1):
        if not raw.strip():
            continue
        try:
            turn = decode_turn(raw, max_text_bytes=max_text_bytes)
        except InvalidRecord as exc:
            raise click.ClickException(f"line {lineno}: {exc.code}: {exc.message}") from None
        if turn is not None:
            yield turn


async def _feed(settings: Settings, turns: Iterable[Turn]) -> int:
    from topics.definitions import ensure_topics
    from topics.io import produce_turns

    await ensure_topics(settings)
    return await produce_turns(settings, turns)


@click.command(name="feed")
@broker_option
@click.option("--session", metavar="ID", help="Session id of the turns (required unless --records).")
@click.option("--first-turn", type=click.IntRange(min=1, max=2147483647), default=None, metavar="N",
              help="Number the turns explicitly from N. Default: unnumbered, so the worker numbers them "
                   "after the session's last turn (a second feed of a session continues it). A number the "
                   "worker has already seen for the session is ignored as a repeat.")
@click.option("--channel", metavar="NAME", default=None, help="Channel logged with the events (default: stream).")
@click.option("--source", metavar="ID", default=None, help="Brain source to resolve against (default: default).")
@click.option("--records", is_flag=True,
              help="stdin holds Turn records (JSON lines, any sessions, e.g. a transcript) instead of "
                   "'role: text' lines.")
def feed(broker: str | None, session: str | None, first_turn: int | None, channel: str | None, source: str | None,
         records: bool) -> None:
    """Send conversation turns from stdin to the 'turns' topic.

    Each non-blank line is one turn, as gbrain 'watch' reads it: 'user: ...' or 'assistant: ...'
    (a line without a prefix is a user turn). The worker numbers the turns after the session's last
    one, so feeding the same session again continues it; --first-turn N numbers them explicitly.

    \b
    Examples:
      printf 'user: Did Alice Example reply?\\nassistant: Not yet.\\n' | volunteer feed --session s1
      volunteer feed --records < pipeline/samples/transcript.jsonl
    """
    settings = settings_with_flags({}, broker=broker)
    quiet_client_logs()
    if records:
        if session or channel or source or first_turn is not None:
            raise click.UsageError("--records takes everything from the records; drop --session/--channel/"
                                   "--source/--first-turn")
        turns: Iterable[Turn] = list(turns_from_records(sys.stdin.buffer, settings.max_text_bytes))
    else:
        if not session:
            raise click.UsageError("--session ID is required (the conversation the turns belong to)")
        if len(session) > settings.max_session_id_chars:
            raise click.UsageError(f"--session is longer than {settings.max_session_id_chars} characters")
        if sys.stdin.isatty():
            click.echo("reading 'role: text' lines; end with Ctrl-D", err=True)
        text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        turns = list(turns_from_lines(text.split("\n"), session, first_turn=first_turn, channel=channel,
                                      source=source, now_ms=int(time.time() * 1000)))
    if not turns:
        click.echo("nothing to send (no non-blank lines)", err=True)
        return
    try:
        sent = asyncio.run(asyncio.wait_for(_feed(settings, turns), 120))
    except (TimeoutError, OSError) as exc:
        raise click.ClickException(f"cannot send to the broker at {settings.broker}: {exc or 'timed out'}") from None
    except Exception as exc:
        if type(exc).__module__.startswith("aiokafka"):
            raise click.ClickException(f"cannot send to the broker at {settings.broker}: {exc}") from None
        raise
    sessions = sorted({t.session_id for t in turns})
    if records:
        click.echo(f"sent {sent} turn(s) of {len(sessions)} session(s) to {settings.topic_turns}", err=True)
    elif first_turn is None:
        click.echo(f"sent {sent} turn(s) to {settings.topic_turns} for session {session} "
                   "(numbered by the worker after the session's last turn)", err=True)
    else:
        last = first_turn + sent - 1
        click.echo(f"sent {sent} turn(s) to {settings.topic_turns} for session {session} "
                   f"(turns {first_turn}-{last}; continue with --first-turn {last + 1} or without it)", err=True)
