"""The one version check reads the pins that pyproject.toml and constraints.txt declare."""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.compat.versions import check_versions
from pipeline.internals import PINNED

ROOT = Path(__file__).resolve().parents[3]


def _pins(text: str) -> dict[str, str]:
    return {name: version for name, version in re.findall(r"^\s*\"?([A-Za-z0-9_.-]+)==([^\"\s,]+)", text, re.M)}


def test_the_checked_versions_are_the_pinned_ones() -> None:
    declared = _pins((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    frozen = _pins((ROOT / "constraints.txt").read_text(encoding="utf-8"))
    for dist, version in PINNED.items():
        assert declared.get(dist) == version, f"pyproject.toml pins {dist}=={declared.get(dist)}, compat checks {version}"
        assert frozen.get(dist) == version, f"constraints.txt has {dist}=={frozen.get(dist)}, compat checks {version}"


def test_the_installed_versions_pass() -> None:
    check_versions()
