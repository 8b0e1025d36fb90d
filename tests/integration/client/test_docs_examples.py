"""The examples in docs/client.md run against a real broker and print exactly what the page shows.

Each ``<!-- example: NAME -->`` Python block runs as its own script (a subprocess, configured only
through ``VOLUNTEER_*`` variables, as a reader would run it); the ``text`` block that follows is
its expected output. Between the examples a *stand-in worker* turns the published turns into
volunteered pages: it reads the records the example really put on the ``turns`` topic, runs them
through the real decision core (``volunteer replay --json`` on the sample brain) and publishes the
resulting pages as the worker would. So the pages shown are the pipeline's real decisions, while
this test stays independent of the Faust shell (tests/integration/client/test_with_worker.py runs
the client against a real worker).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipeline.client import TurnPublisher
from pipeline.settings import Settings
from tests.integration.client.helpers import SAMPLE_TRANSCRIPT, read_topic, replay_pages, run, seed_pages
from topics.records import Volunteered, decode_turn

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "client.md"
SESSION = "board-prep"
FOLLOW_TURN = "And has Swami sent the Atlas review notes?"
SCRIPT_TIMEOUT_S = 60.0
_BLOCK = re.compile(r"<!-- example: (?P<name>[\w-]+) -->\s*```python\n(?P<code>.*?)```(?P<after>.*?)(?=<!-- example:|\Z)",
                    re.DOTALL)
_OUTPUT = re.compile(r"```text\n(?P<out>.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Example:
    name: str
    code: str
    output: str


def examples() -> dict[str, Example]:
    text = DOC.read_text(encoding="utf-8")
    found: dict[str, Example] = {}
    for m in _BLOCK.finditer(text):
        out = _OUTPUT.search(m.group("after"))
        assert out is not None, f"docs/client.md example {m.group('name')!r} has no ```text output block"
        found[m.group("name")] = Example(m.group("name"), m.group("code"), out.group("out"))
    return found


def test_every_python_block_is_an_executed_example() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert text.count("```python") == len(examples()), (
        "every ```python block of docs/client.md must be an executed example (<!-- example: NAME -->)")
    assert set(examples()) == {"publish", "history", "follow"}


def script_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VOLUNTEER_")}
    env.update({
        "VOLUNTEER_BROKER": settings.broker,
        "VOLUNTEER_TOPIC_TURNS": settings.topic_turns,
        "VOLUNTEER_TOPIC_VOLUNTEERED": settings.topic_volunteered,
        "VOLUNTEER_TOPIC_DLQ": settings.topic_dlq,
        "PYTHONPATH": str(ROOT),
    })
    return env


def run_example(example: Example, settings: Settings) -> str:
    done = subprocess.run([sys.executable, "-c", example.code], env=script_env(settings), cwd=ROOT,
                          capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"example {example.name!r} failed:\n{done.stderr}"
    return done.stdout


async def stand_in_worker(settings: Settings, expected_turns: int, only_turn: int | None = None) -> list[Volunteered]:
    """Turn what is on the turns topic into pages on the volunteered topic (see module docstring)."""
    records = await read_topic(settings, settings.topic_turns, expected_turns)
    lines = [r.value for r in sorted(records, key=lambda r: (r.partition, r.offset)) if r.value is not None]
    pages = [p for p in replay_pages(lines) if only_turn is None or p.turn == only_turn]
    await seed_pages(settings, pages)
    return pages


def test_client_doc_examples_run_and_print_what_the_doc_shows(client_settings: Settings) -> None:
    docs = examples()

    # 1. Publish a conversation: the printed numbers, and the records really on the topic.
    assert run_example(docs["publish"], client_settings) == docs["publish"].output
    records = run(read_topic(client_settings, client_settings.topic_turns, 3))
    turns = [decode_turn(r.value, r.key) for r in records]
    assert [(t.session_id, t.turn, t.channel) for t in turns if t] == [(SESSION, n, "docs") for n in (1, 2, 3)]

    # Pages for the example session, plus another session's (from the sample transcript) that the
    # examples must filter out.
    pages = run(stand_in_worker(client_settings, 3))
    assert pages and {p.session_id for p in pages} == {SESSION}
    others = [p for p in replay_pages(SAMPLE_TRANSCRIPT.read_bytes().splitlines()) if p.session_id != SESSION]
    assert others
    run(seed_pages(client_settings, others))

    # 2. What was volunteered so far.
    assert run_example(docs["history"], client_settings) == docs["history"].output

    # 3. Follow live: turn 4 is published once the example says it is following.
    assert run_follow(docs["follow"], client_settings) == docs["follow"].output


def run_follow(example: Example, settings: Settings) -> str:
    async def scenario() -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", example.code, env=script_env(settings), cwd=ROOT,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        assert proc.stdout is not None and proc.stderr is not None
        try:
            try:
                first = await asyncio.wait_for(proc.stdout.readline(), SCRIPT_TIMEOUT_S)
            except TimeoutError:
                pytest.fail(f"the follow example printed no line within {SCRIPT_TIMEOUT_S:.0f} s; it must "
                            "print one once it is following, before any page arrives")
            assert first, (await proc.stderr.read()).decode()
            async with TurnPublisher(settings) as publisher:
                publisher.resume(SESSION, 3)
                await publisher.publish(SESSION, "user", FOLLOW_TURN, channel="docs")
            new_pages = await stand_in_worker(settings, 4, only_turn=4)
            assert new_pages, "turn 4 volunteered nothing; the follow example would wait forever"
            rest, err = await asyncio.wait_for(proc.communicate(), SCRIPT_TIMEOUT_S)
            assert proc.returncode == 0, err.decode()
            return first.decode() + rest.decode()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

    return run(scenario(), timeout=2 * SCRIPT_TIMEOUT_S + 30)
