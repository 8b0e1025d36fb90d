"""scripts/gen_labelled_transcript.py: deterministic, honest labels, and the bundled sample is its output."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from pipeline.braindir import iter_brain_dir
from tests.unit.tuning.conftest import BRAIN_DIR, LABELLED

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gen_labelled_transcript.py"
CONFORMANCE_BRAIN = Path(__file__).resolve().parents[2] / "fixtures" / "conformance" / "brain"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_labelled_transcript", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def render(gen: ModuleType, brain: Path, turns: int, seed: int) -> bytes:
    return b"".join(line.to_json() + b"\n" for line in gen.generate(brain, turns, seed, "default"))


def test_the_bundled_sample_is_the_generators_output(gen: ModuleType) -> None:
    assert render(gen, BRAIN_DIR, 240, 6) == LABELLED.read_bytes()


def test_same_seed_same_bytes_other_seed_other_bytes(gen: ModuleType) -> None:
    one = render(gen, BRAIN_DIR, 300, 11)
    assert one == render(gen, BRAIN_DIR, 300, 11)
    assert one != render(gen, BRAIN_DIR, 300, 12)


@pytest.mark.parametrize("brain", [BRAIN_DIR, CONFORMANCE_BRAIN], ids=["sample", "conformance"])
def test_labels_follow_the_rules(gen: ModuleType, brain: Path) -> None:
    records = [orjson.loads(line) for line in render(gen, brain, 3000, 5).splitlines()]
    assert len(records) == 3000
    pages, _ = iter_brain_dir(brain)
    live = {p.slug for p in pages if not p.deleted and p.source_id == "default"}
    expected_in: dict[str, set[str]] = {}
    last: dict[str, tuple[int, int]] = {}
    for record in records:
        session, expected = record["session_id"], set(record["expected_slugs"])
        acceptable = set(record.get("acceptable_slugs", []))
        assert expected <= live and acceptable <= live
        assert not expected & acceptable
        seen = expected_in.setdefault(session, set())
        assert not expected & seen, "a page is expected only where it first comes up in its session"
        seen |= expected
        # turns are numbered 1, 2, 3... per session and time never goes backwards within a session
        turn, ts = last.get(session, (0, 0))
        assert (record["turn"], record["ts"] >= ts) == (turn + 1, True)
        last[session] = (record["turn"], record["ts"])
    stamps = [r["ts"] for r in records]
    assert stamps == sorted(stamps)  # sessions interleaved by time, as on a topic
    labelled_with_pages = sum(1 for r in records if r["expected_slugs"])
    assert 0.2 < labelled_with_pages / len(records) < 0.5
