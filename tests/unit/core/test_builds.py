"""The conformance suites on every build of the core this checkout has: compiled (mypyc) and pure.

The suite itself imports whichever build ``pipeline.corebuild`` selected (the compiled one after
``./scripts/setup`` on a machine with a C compiler). This module runs the conformance and spec-case
tests again in a fresh interpreter on the *other* build, with ``VOLUNTEER_PURE_CORE`` switching the
plain modules on or off, and checks that the subprocess really ran the build it was asked for.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.corebuild import C_SCANNER_ENV, CORE_DIR, PURE_ENV, core_build

ROOT = Path(__file__).resolve().parents[3]
SUITES = ["tests/unit/core/test_conformance.py", "tests/unit/core/test_spec_cases.py"]


def _run(pure: bool, c_scanner: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, PURE_ENV: "1" if pure else "0", C_SCANNER_ENV: "1" if c_scanner else "0"}
    probe = "import pipeline.corebuild as c; print(c.core_build())"
    build = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    suite.stdout = build.stdout + suite.stdout
    return suite


def _compiled_available() -> bool:
    return any(p.name.startswith("compiled__mypyc") for p in Path(CORE_DIR).iterdir())


def _c_scanner_available() -> bool:
    return any(p.name.startswith("_cscan.") and not p.name.endswith((".c", ".h", ".pyi"))
               for p in Path(CORE_DIR).iterdir())


COMPILED = "compiled (mypyc + C scanner)" if _c_scanner_available() else "compiled (mypyc)"
"""The compiled build's name: with the optional C scanner when scripts/build_core.py built it."""


def test_the_pure_build_passes_the_conformance_suites() -> None:
    result = _run(pure=True)
    assert result.stdout.startswith("pure Python"), result.stdout[:300]
    assert result.returncode == 0 and " passed" in result.stdout and "failed" not in result.stdout, result.stdout[-2000:]


def test_the_compiled_build_passes_the_conformance_suites_when_built() -> None:
    result = _run(pure=False)
    first = result.stdout.splitlines()[0]
    if _compiled_available() and "stale" not in first:
        assert first == COMPILED, first
    else:  # no compiler at set-up (or a source edited since): the plain modules answer, and say so
        assert first.startswith("pure Python"), first
    assert result.returncode == 0 and " passed" in result.stdout and "failed" not in result.stdout, result.stdout[-2000:]


def test_the_mypyc_build_without_the_c_scanner_passes_the_conformance_suites() -> None:
    """What a machine whose C scanner did not compile (or failed its smoke test) installs: the mypyc
    build alone, switched on here with ``VOLUNTEER_C_SCANNER=0``."""
    result = _run(pure=False, c_scanner=False)
    first = result.stdout.splitlines()[0]
    if _compiled_available() and "stale" not in first:
        assert first == "compiled (mypyc)", first
    else:
        assert first.startswith("pure Python"), first
    assert result.returncode == 0 and " passed" in result.stdout and "failed" not in result.stdout, result.stdout[-2000:]


def test_the_c_scanner_is_left_out_when_switched_off() -> None:
    env = {**os.environ, C_SCANNER_ENV: "0"}
    probe = "from pipeline.core import extract, window; print(extract.C_SCANNER, window._c_merge is None)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"], out.stdout


def test_the_build_in_use_is_named() -> None:
    build = core_build()
    assert build == COMPILED or build.startswith("pure Python"), build
    if os.environ.get(PURE_ENV) == "1":
        assert build.startswith("pure Python (")


@pytest.mark.parametrize("pure", [True, False])
def test_version_names_the_core_build(pure: bool) -> None:
    env = {**os.environ, PURE_ENV: "1" if pure else "0"}
    out = subprocess.run([sys.executable, "-m", "pipeline", "--version"], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("volunteer, version ") and "\ndecision core: " in out, out
    assert ("pure Python" in out) == (pure or not _compiled_available() or "stale" in out), out


def test_the_compiled_build_takes_the_bare_builders_and_the_pure_one_does_not() -> None:
    """The page and step-result builders skip the dataclass ``__init__`` only where direct slot sets
    work (the compiled core); a probe that stopped telling that would silently slow the compiled build."""
    from pipeline.core import session, types

    compiled = core_build().startswith("compiled (mypyc")
    assert types.BARE_FIELDS is compiled
    assert session._BARE_RESULT is compiled


def test_the_pure_build_never_imports_the_c_scanner() -> None:
    """The plain modules are the fallback and the reference: the C scanner is not theirs to use."""
    env = {**os.environ, PURE_ENV: "1"}
    probe = "from pipeline.core import extract; print(extract.C_SCANNER)"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _build_core_module() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_core_under_test", ROOT / "scripts" / "build_core.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("failure", ["build", "smoke"])
def test_a_c_scanner_that_fails_is_removed_with_a_one_line_note(
    failure: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The C part is optional: a failed build or smoke test leaves no extension behind (the patterns
    and the Python steps then answer), and says so in one line."""
    build_core: Any = _build_core_module()
    built = tmp_path / "_cscan.so"

    def fake_build() -> bool:
        built.write_bytes(b"")
        if failure == "build":
            raise RuntimeError("no compiler after all")
        return True

    monkeypatch.setattr(build_core, "c_scanner_file", lambda: built)
    monkeypatch.setattr(build_core, "build_c_scanner", fake_build)
    monkeypatch.setattr(build_core, "smoke_test", lambda code, what: failure != "smoke")
    build_core.add_c_scanner()
    assert not built.exists()
    notes = capsys.readouterr().err.strip().splitlines()
    assert notes[0].startswith("build_core: compiling the C scanner")
    if failure == "build":
        assert len(notes) == 2 and "the patterns scan instead" in notes[1], notes
