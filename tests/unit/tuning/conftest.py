"""The bundled sample brain and labelled transcript, shared by the tuning tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex

SAMPLES = Path(__file__).resolve().parents[3] / "pipeline" / "samples"
BRAIN_DIR = SAMPLES / "brain"
LABELLED = SAMPLES / "labelled_transcript.jsonl"
TRANSCRIPT = SAMPLES / "transcript.jsonl"


@pytest.fixture(scope="session")
def brain() -> BrainIndex:
    return load_brain_dir(BRAIN_DIR)


@pytest.fixture(scope="session")
def labelled_lines() -> list[bytes]:
    return LABELLED.read_bytes().split(b"\n")[:-1]
