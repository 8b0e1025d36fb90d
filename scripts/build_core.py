"""Compile the pure decision core (``pipeline/core``) with mypyc, in place, when a C compiler is there.

Called by ``scripts/setup``. The typed Python sources stay the one source of truth: mypyc turns each
module into a C extension placed next to its ``.py``, and Python's import system prefers the
extension. Without a compiler (or with ``VOLUNTEER_PURE_CORE=1`` at build time) nothing is built and
the plain modules run, with the same results; ``volunteer --version`` and ``volunteer doctor`` say
which build is in use (``pipeline.corebuild``). A failed build removes what it left behind, so a
half-built core is never imported.

    .venv/bin/python scripts/build_core.py           # build (skips when the build is current)
    .venv/bin/python scripts/build_core.py --no-c    # the mypyc build without the C scanner
    .venv/bin/python scripts/build_core.py --clean   # remove the compiled modules: pure Python again

With the mypyc build comes the C scanner (``pipeline/core/_cscan.c``: the patterns of
``pipeline/core/extract.py`` in one pass over a turn's characters, its Unicode tables generated from the
pinned ``regex`` by ``scripts/gen_scan_tables.py``). It is optional: when it does not build or fails its
own smoke test it is removed with a one-line note, and ``extract.py`` finds the same with the patterns.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORE = ROOT / "pipeline" / "core"
GROUP = "pipeline.core.compiled"  # the shared library lives in the package: pipeline/core/compiled__mypyc.*.so
STAMP = CORE / ".compiled-sources"  # the sources' checksum; pipeline.corebuild compares it at import
C_SCANNER = "_cscan"  # pipeline/core/_cscan.c -> pipeline/core/_cscan.<suffix>, the optional C part


def sources() -> list[Path]:
    """Every core module but the package's ``__init__`` (kept plain so the package always imports)."""
    return sorted(p for p in CORE.glob("*.py") if p.name != "__init__.py")


def fingerprint() -> str:
    from pipeline.corebuild import fingerprint as of_sources  # one definition, read at import time too

    return of_sources()


def _suffix() -> str:
    return str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def built_files() -> list[Path]:
    """The mypyc build's extensions (the C scanner's is not one of them: it is optional)."""
    return [p for p in CORE.glob(f"*{_suffix()}") if not p.name.startswith(C_SCANNER + ".")]


def c_scanner_file() -> Path:
    return CORE / f"{C_SCANNER}{_suffix()}"


def clean() -> None:
    for path in built_files():
        path.unlink()
    c_scanner_file().unlink(missing_ok=True)
    STAMP.unlink(missing_ok=True)


def _build_in_place(name: str, ext_modules: Callable[[], list[Any]]) -> None:
    """Run setuptools' ``build_ext --inplace`` for ``ext_modules()`` (made from the project root, where
    their relative paths point) with a throw-away build folder. A bare Distribution: setup() would
    read the project's pyproject.toml, which is not this build."""
    from setuptools import Distribution

    cwd = os.getcwd()
    tmp = tempfile.mkdtemp(prefix=f"volunteer-{name}-")
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # mypyc's notes ("treating ... as list")
            dist = Distribution({"name": f"pipeline-core-{name}", "ext_modules": ext_modules()})
            dist.script_args = ["-q", "build_ext", "--inplace", "--build-temp", tmp, "--build-lib", tmp]
            dist.parse_command_line()
            dist.run_commands()
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(ROOT / "build" / "__mypyc_tmp", ignore_errors=True)


def build() -> bool:
    from mypyc.build import mypycify  # only when building

    modules = [str(p.relative_to(ROOT)) for p in sources()]
    _build_in_place("mypyc", lambda: list(mypycify(["--ignore-missing-imports", *modules], opt_level="3",
                                                    group_name=GROUP)))
    return len(built_files()) == len(sources()) + 1


def build_c_scanner() -> bool:
    """Compile ``pipeline/core/_cscan.c`` in place (plain C and the Python headers, nothing else)."""
    from setuptools import Extension

    # -ffp-contract=off: the merge's weights must be the very doubles Python computes (no fused a*b+c).
    _build_in_place("cscan", lambda: [Extension(f"pipeline.core.{C_SCANNER}", [f"pipeline/core/{C_SCANNER}.c"],
                                                extra_compile_args=["-O2", "-ffp-contract=off"])])
    return c_scanner_file().exists()


def add_c_scanner() -> None:
    """Build the C scanner next to a working mypyc build; on any failure remove it, with a note."""
    print("build_core: compiling the C scanner (pipeline/core/_cscan.c)", file=sys.stderr)
    try:
        ok = build_c_scanner()
    except (Exception, SystemExit) as exc:
        ok = False
        print(f"build_core: the C scanner did not build ({exc}); the patterns scan instead (same results)",
              file=sys.stderr)
    if ok and not smoke_test(C_SMOKE, "the C scanner"):
        ok = False
    if not ok:
        c_scanner_file().unlink(missing_ok=True)


def main() -> int:
    if "--clean" in sys.argv[1:]:
        clean()
        return 0
    if os.environ.get("VOLUNTEER_PURE_CORE") == "1":
        clean()
        print("build_core: VOLUNTEER_PURE_CORE=1, the core stays pure Python", file=sys.stderr)
        return 0
    with_c = "--no-c" not in sys.argv[1:]
    want = fingerprint()
    if STAMP.exists() and STAMP.read_text().strip() == want and len(built_files()) == len(sources()) + 1:
        if not with_c:
            c_scanner_file().unlink(missing_ok=True)
        elif not c_scanner_file().exists():
            add_c_scanner()
        return 0
    clean()
    if shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") is None:
        print("build_core: no C compiler found, the core stays pure Python (same results, slower)", file=sys.stderr)
        return 0
    print("build_core: compiling pipeline/core with mypyc (about 30 s)", file=sys.stderr)
    try:
        ok = build()
    except (Exception, SystemExit) as exc:  # a failed build must never break the set-up
        ok = False
        print(f"build_core: mypyc build failed ({exc}); the core stays pure Python", file=sys.stderr)
    if ok:
        STAMP.write_text(want + "\n")
        ok = smoke_test(SMOKE, "the compiled core")
    if not ok:
        clean()
    elif with_c:
        add_c_scanner()
    return 0


SMOKE = """
import pipeline.corebuild as c
from pipeline.braindir import load_brain_dir
from pipeline.core.op import volunteer_context
from pipeline.core.session import DecisionOptions, run_lines
assert c.core_build().startswith("compiled (mypyc"), c.core_build()
brain = load_brain_dir("pipeline/samples/brain")
assert volunteer_context("user: ping Jordan Lee", brain)["count"] == 1
run_lines(["user: Did Galewright reply?", "assistant: not yet"], brain, options=DecisionOptions())
"""


C_SMOKE = """
import pipeline.corebuild as c
from pipeline.core import extract, window
assert c.core_build() == "compiled (mypyc + C scanner)", c.core_build()
texts = ["", "ping @jordan_lee and Jordan Lee. Zoë's café?", "会議は東京で 서울 ＡＢＣ", "a\\u2028Bob\\ufeffCarol x-ray"]
for text in texts:
    assert extract._c_scan(text) == extract.scan_text(text), text
    assert extract._extract(text) == extract._extract_python(text), text
lines = "user: " + "\\nassistant: ".join(texts) + "\\r\\n  more\\nUSER : Ann Lee"
turns = window.parse_window(lines)
assert turns == window._parse_window_python(lines), lines
rows = [(role, extract.extract_candidates(text)) for role, text in turns]
assert window.merge_window(rows) == window._merge_python(rows, None)
"""


def smoke_test(code: str, what: str) -> bool:
    """The built modules import and work in a fresh interpreter; else they are removed."""
    import subprocess  # only after a build

    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "VOLUNTEER_PURE_CORE": "0"})
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        fallback = "the core stays pure Python" if what == "the compiled core" else "the patterns scan instead"
        print(f"build_core: {what} failed its smoke test ({last}); {fallback}", file=sys.stderr)
    return result.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
