"""The bare Faust anchor of ``python -m bench`` (bench/bare_faust_app.py) on a real broker and PostgreSQL.

The pipeline's burst and CPU per turn are printed as ratios to this anchor, so a Faust or broker
change that broke the bare app would take the anchor out of every bench run: this runs it for real,
small, and checks it did the bare pipeline's whole job (one row per turn, nothing lost)."""

from __future__ import annotations

from pathlib import Path

from bench import bare_faust_bench
from bench.bare_faust_app import count_rows
from tests.services.broker import TestNames


def test_the_bare_faust_anchor_stores_one_row_per_turn(module_broker_url: str, migrated_database_url: str,
                                                         names: TestNames, tmp_path: Path) -> None:
    result = bare_faust_bench.run_burst(module_broker_url, migrated_database_url, tmp_path, 300, partitions=2,
                                        prefix=names.prefix)
    assert result.turns >= 300
    assert count_rows(migrated_database_url) == result.turns + 1  # the burst and the probe, each once
    assert result.per_s > 0
    assert result.cpu_us_per_turn["worker"] > 0  # the bare worker did the work, and was metered
    assert "broker" not in result.cpu_us_per_turn  # only the processes it was given are metered
