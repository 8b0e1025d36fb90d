"""The worker app's producer: its batches are ``producer_batch_bytes`` long (Faust's own default, 16 KiB,
split a window batch's session states into ~5 batches a partition; docs/performance.md, goal 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.agents.brain_holder import BrainHolder
from pipeline.agents.statecrypt import StateCipher, new_key_text, parse_key
from pipeline.app import StreamApp
from pipeline.settings import load_settings

SAMPLES = Path(__file__).resolve().parents[2] / "pipeline" / "samples"


@pytest.mark.parametrize(("given", "expected"), [({}, 262_144), ({"producer_batch_bytes": 65_536}, 65_536)])
def test_the_producer_batch_size_is_the_setting(tmp_path: Path, given: dict[str, int], expected: int) -> None:
    settings = load_settings(broker="kafka://127.0.0.1:9", data_dir=str(tmp_path), **given)
    stream = StreamApp(settings, BrainHolder.from_directory(SAMPLES / "brain"), partitions=1,
                       state_cipher=StateCipher(parse_key(new_key_text())))
    assert stream.app.conf.producer_max_batch_size == expected
