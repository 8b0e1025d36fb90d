"""Shared fixtures of the decision-core tests: the conformance brain, loaded once per session."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex

CONFORMANCE = Path(__file__).resolve().parents[2] / "fixtures" / "conformance"


def load_cases(name: str) -> list[dict[str, Any]]:
    with (CONFORMANCE / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


OP_CASES = load_cases("cases-op.jsonl")
WATCH_CASES = load_cases("cases-watch.jsonl")


@pytest.fixture(scope="session")
def conformance_brain() -> BrainIndex:
    return load_brain_dir(CONFORMANCE / "brain")
