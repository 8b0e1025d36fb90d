"""Which build of the decision core runs: the mypyc-compiled one, or the plain Python modules.

``scripts/build_core.py`` (run by ``scripts/setup``) compiles ``pipeline/core`` in place when a C
compiler is there; an extension module next to its ``.py`` wins the import. :func:`select` runs
once, from ``pipeline/__init__.py``, before anything imports the core, and keeps the plain modules
when

- ``VOLUNTEER_PURE_CORE=1`` is set (how the suite runs the conformance tests on both builds), or
- the compiled build is not complete and current: a source edited after the build (newer than the
  build's stamp), or a module missing its extension. A stale build must never answer for a source
  it was not built from.

Both builds give identical results (``tests/unit/core/test_builds.py``); :func:`core_build` says
which one is in use, for ``volunteer --version`` and ``volunteer doctor``.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec, SourceFileLoader
from pathlib import Path

CORE_DIR = Path(__file__).resolve().parent / "core"
STAMP_NAME = ".compiled-sources"
PURE_ENV = "VOLUNTEER_PURE_CORE"

_reason = "not selected yet"


class _PureCoreFinder:
    """A meta-path finder that loads ``pipeline.core.<module>`` from its ``.py`` file."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if not name.startswith("pipeline.core."):
            return None
        source = CORE_DIR / (name.rpartition(".")[2] + ".py")
        if not source.is_file():
            return None
        spec = ModuleSpec(name, SourceFileLoader(name, str(source)), origin=str(source))
        spec.has_location = True  # __file__ and the cached bytecode, as for any source module
        return spec


def _compiled_state() -> str | None:
    """``None`` when a complete, current compiled build is there; else why the plain modules run."""
    suffix = EXTENSION_SUFFIXES[0]
    try:
        stamp_mtime = (CORE_DIR / STAMP_NAME).stat().st_mtime
    except OSError:
        return "not compiled (no C compiler at set-up, or scripts/build_core.py not run)"
    with os.scandir(CORE_DIR) as entries:
        names = {e.name: e for e in entries}
    for name, entry in names.items():
        if not name.endswith(".py") or name == "__init__.py":
            continue
        if name[:-3] + suffix not in names:
            return f"compiled build incomplete ({name} has no extension): run ./scripts/setup"
        if entry.stat().st_mtime > stamp_mtime:
            return f"compiled build is stale ({name} changed since): run ./scripts/setup"
    return None


def select() -> None:
    """Install the plain-modules finder when the compiled core must not (or cannot) be used."""
    global _reason
    if os.environ.get(PURE_ENV) == "1":
        reason: str | None = f"pure Python ({PURE_ENV}=1)"
    else:
        reason = _compiled_state()
    if reason is None:
        _reason = "compiled (mypyc)"
        return
    _reason = reason if reason.startswith("pure") else f"pure Python: {reason}"
    if not any(isinstance(f, _PureCoreFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PureCoreFinder())  # type: ignore[arg-type]


def core_build() -> str:
    """What runs the decision core, with the reason when it is the plain Python one."""
    module = sys.modules.get("pipeline.core.session")
    if module is None:
        import pipeline.core.session as module
    compiled = str(getattr(module, "__file__", "")).endswith(tuple(EXTENSION_SUFFIXES))
    if compiled:
        return "compiled (mypyc)"
    return _reason if _reason.startswith("pure") else "pure Python"


def is_compiled() -> bool:
    return core_build().startswith("compiled")
