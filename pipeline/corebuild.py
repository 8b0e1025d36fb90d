"""Which build of the decision core runs: the mypyc-compiled one, or the plain Python modules.

``scripts/build_core.py`` (run by ``scripts/setup``) compiles ``pipeline/core`` in place when a C
compiler is there; an extension module next to its ``.py`` wins the import. :func:`select` (called
from ``pipeline/__init__.py``) puts a finder in front of the import system that decides at the
first import of a core module, so a process that never uses the core (the harness hook) pays
nothing but the finder's prefix check. It keeps the plain modules when

- ``VOLUNTEER_PURE_CORE=1`` is set (how the suite runs the conformance tests on both builds), or
- the compiled build is not complete and current: a source that differs from what the build was
  made from (the stamp holds a checksum of the sources), or a module missing its extension. A stale build must never answer for a source
  it was not built from.

Both builds give identical results (``tests/unit/core/test_builds.py``); :func:`core_build` says
which one is in use, for ``volunteer --version`` and ``volunteer doctor``: the compiled one with the C
scanner of ``pipeline/core/_cscan.c`` when that optional part was built too ("compiled (mypyc + C
scanner)"). The plain build never imports that scanner: the finder refuses a core module without a
``.py``.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (mypy honours the name)
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

# os.path, not pathlib or importlib: this module is imported by every process, the hook's included.
CORE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "core")
STAMP_NAME = ".compiled-sources"
PURE_ENV = "VOLUNTEER_PURE_CORE"
C_SCANNER_ENV = "VOLUNTEER_C_SCANNER"
"""``0``: the compiled build runs without its optional C scanner (the mypyc build alone), as on a
machine where the scanner did not compile: for comparing the two, and for the tests of that build."""
C_SCANNER_MODULE = "pipeline.core._cscan"
_PREFIX = "pipeline.core."


def _extension_suffixes() -> list[str]:
    import _imp  # what importlib.machinery.EXTENSION_SUFFIXES is made of, without importing importlib

    return list(_imp.extension_suffixes())


def core_sources() -> list[str]:
    """The compiled modules' sources: every ``.py`` of the core but the package's ``__init__``."""
    return sorted(n for n in os.listdir(CORE_DIR) if n.endswith(".py") and n != "__init__.py")


def c_sources() -> list[str]:
    """The C scanner's sources (``_cscan.c`` and its generated tables), part of the fingerprint."""
    return sorted(n for n in os.listdir(CORE_DIR) if n.endswith((".c", ".h")))


def fingerprint() -> str:
    """What a compiled build was made from: the interpreter and every source's name and bytes.

    CRC-32 over ~150 KB takes well under a millisecond (and zlib, unlike hashlib, no OpenSSL); it
    only has to notice edits, not resist forgery. ``scripts/build_core.py`` writes it to the stamp.
    """
    import zlib

    crc = zlib.crc32(sys.version.encode())
    for name in core_sources() + c_sources():
        with open(os.path.join(CORE_DIR, name), "rb") as fh:
            crc = zlib.crc32(fh.read(), zlib.crc32(name.encode(), crc))
    return f"{crc:08x}"


def _compiled_state() -> str | None:
    """``None`` when a complete, current compiled build is there; else why the plain modules run."""
    suffix = _extension_suffixes()[0]
    try:
        with open(os.path.join(CORE_DIR, STAMP_NAME), encoding="ascii") as fh:
            stamp = fh.read().strip()
    except (OSError, ValueError):
        return "not compiled (no C compiler at set-up, or scripts/build_core.py not run)"
    present = set(os.listdir(CORE_DIR))
    for name in core_sources():
        if name[:-3] + suffix not in present:
            return f"compiled build incomplete ({name} has no extension): run ./scripts/setup"
    if stamp != fingerprint():
        return "compiled build is stale (a core source changed since): run ./scripts/setup"
    return None


class _CoreBuildFinder:
    """A meta-path finder: at the first ``pipeline.core.<module>`` import it decides the build; for
    the plain one it loads every core module from its ``.py``, else it lets the import go on."""

    def __init__(self) -> None:
        self.reason: str | None = None  # None: not decided yet
        self.pure = False

    def decide(self) -> None:
        if self.reason is not None:
            return
        if os.environ.get(PURE_ENV) == "1":
            self.reason, self.pure = f"pure Python ({PURE_ENV}=1)", True
            return
        why = _compiled_state()
        self.pure = why is not None
        self.reason = "compiled (mypyc)" if why is None else f"pure Python: {why}"

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if not name.startswith(_PREFIX):
            return None
        self.decide()
        if name == C_SCANNER_MODULE and os.environ.get(C_SCANNER_ENV) == "0":
            raise ModuleNotFoundError(f"No module named {name!r}: {C_SCANNER_ENV}=0", name=name)
        if not self.pure:
            return None
        source = os.path.join(CORE_DIR, name[len(_PREFIX):] + ".py")
        if not os.path.isfile(source):  # a C-only module (the C scanner): not part of the plain build
            raise ModuleNotFoundError(f"No module named {name!r} in the pure Python core", name=name)
        from importlib.machinery import ModuleSpec, SourceFileLoader

        spec = ModuleSpec(name, SourceFileLoader(name, source), origin=source)
        spec.has_location = True  # __file__ and the cached bytecode, as for any source module
        return spec


_finder = _CoreBuildFinder()


def select() -> None:
    """Put the build finder first on ``sys.meta_path`` (once), before anything imports the core."""
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)


def core_build() -> str:
    """What runs the decision core, with the reason when it is the plain Python one."""
    module = sys.modules.get("pipeline.core.session")
    if module is None:
        import pipeline.core.session as module
    if str(getattr(module, "__file__", "")).endswith(tuple(_extension_suffixes())):
        from pipeline.core.extract import C_SCANNER

        return "compiled (mypyc + C scanner)" if C_SCANNER else "compiled (mypyc)"
    _finder.decide()
    reason = _finder.reason or "pure Python"
    return reason if reason.startswith("pure") else "pure Python"


def is_compiled() -> bool:
    return core_build().startswith("compiled")
