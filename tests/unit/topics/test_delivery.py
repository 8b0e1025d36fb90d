"""The delivery record lives with the other records (topics/delivery.py) and stays as light as the
hook's fast path needs: the hook imports it on every prompt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from topics.delivery import DELIVERY_PREFIX, Delivery, decode_delivery, is_delivery
from topics.records import InvalidRecord

ROOT = str(Path(__file__).resolve().parents[3])
HEAVY = ("json", "re", "enum", "math", "dataclasses", "typing", "orjson", "topics.records", "pipeline.core")


def test_the_hook_fast_path_imports_nothing_heavy_for_the_record() -> None:
    """Up to its output the hook loads only the record's own module from ``topics`` (its limits and
    channels: the hook depends on the record, not the other way round), and nothing heavy."""
    code = ("import sys, pipeline.entry, pipeline.hook.user_prompt; "
            "before = sorted(m for m in sys.modules if m == 'topics' or m.startswith('topics.')); "
            "import topics.delivery; "
            f"print(before, sorted(m for m in sys.modules if m in {HEAVY!r} or m.startswith('pipeline.core.')))")
    # -I -S: how bootstrap installs the hook (pipeline/launch.py), so site-packages add nothing
    out = subprocess.run([sys.executable, "-I", "-S", "-c", f"import sys; sys.path.append({ROOT!r}); " + code],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['topics', 'topics.delivery'] []"


def test_a_delivery_round_trips_and_starts_with_its_prefix() -> None:
    delivery = Delivery("sé", 3, ["people/a", "people/b", "people/a"], "codex", 1_767_261_600_000)
    raw = delivery.to_json()
    assert raw == ('{"kind":"delivered","session_id":"sé","turn":3,"slugs":["people/a","people/b"],'
                   '"channel":"codex","ts":1767261600000}').encode()
    assert raw.startswith(DELIVERY_PREFIX) and is_delivery(raw)
    assert decode_delivery(raw, "sé".encode()) == delivery
    with pytest.raises(InvalidRecord) as err:
        decode_delivery(raw, b"other")
    assert err.value.code == "key_mismatch"
