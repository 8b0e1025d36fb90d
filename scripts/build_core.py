"""Compile the pure decision core (``pipeline/core``) with mypyc, in place, when a C compiler is there.

Called by ``scripts/setup``. The typed Python sources stay the one source of truth: mypyc turns each
module into a C extension placed next to its ``.py``, and Python's import system prefers the
extension. Without a compiler (or with ``VOLUNTEER_PURE_CORE=1`` at build time) nothing is built and
the plain modules run, with the same results; ``volunteer --version`` and ``volunteer doctor`` say
which build is in use (``pipeline.corebuild``). A failed build removes what it left behind, so a
half-built core is never imported.

    .venv/bin/python scripts/build_core.py           # build (skips when the build is current)
    .venv/bin/python scripts/build_core.py --clean   # remove the compiled modules: pure Python again
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CORE = ROOT / "pipeline" / "core"
GROUP = "pipeline.core.compiled"  # the shared library lives in the package: pipeline/core/compiled__mypyc.*.so
STAMP = CORE / ".compiled-sources"  # the sources' checksum; pipeline.corebuild compares it at import


def sources() -> list[Path]:
    """Every core module but the package's ``__init__`` (kept plain so the package always imports)."""
    return sorted(p for p in CORE.glob("*.py") if p.name != "__init__.py")


def fingerprint() -> str:
    from pipeline.corebuild import fingerprint as of_sources  # one definition, read at import time too

    return of_sources()


def built_files() -> list[Path]:
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return list(CORE.glob(f"*{suffix}"))


def clean() -> None:
    for path in built_files():
        path.unlink()
    STAMP.unlink(missing_ok=True)


def build() -> bool:
    from mypyc.build import mypycify  # only when building
    from setuptools import Distribution

    cwd = os.getcwd()
    tmp = tempfile.mkdtemp(prefix="volunteer-mypyc-")
    os.chdir(ROOT)
    try:
        modules = [str(p.relative_to(ROOT)) for p in sources()]
        # A bare Distribution: setup() would read the project's pyproject.toml, which is not this build.
        with contextlib.redirect_stdout(io.StringIO()):  # mypyc's notes ("treating ... as list")
            dist = Distribution({
                "name": "pipeline-core-compiled",
                "ext_modules": mypycify(["--ignore-missing-imports", *modules], opt_level="3", group_name=GROUP),
            })
            dist.script_args = ["-q", "build_ext", "--inplace", "--build-temp", tmp, "--build-lib", tmp]
            dist.parse_command_line()
            dist.run_commands()
    finally:
        os.chdir(cwd)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(ROOT / "build" / "__mypyc_tmp", ignore_errors=True)
    return len(built_files()) == len(sources()) + 1


def main() -> int:
    if "--clean" in sys.argv[1:]:
        clean()
        return 0
    if os.environ.get("VOLUNTEER_PURE_CORE") == "1":
        clean()
        print("build_core: VOLUNTEER_PURE_CORE=1, the core stays pure Python", file=sys.stderr)
        return 0
    want = fingerprint()
    if STAMP.exists() and STAMP.read_text().strip() == want and len(built_files()) == len(sources()) + 1:
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
        ok = smoke_test()
    if not ok:
        clean()
    return 0


SMOKE = """
import pipeline.corebuild as c
from pipeline.braindir import load_brain_dir
from pipeline.core.op import volunteer_context
from pipeline.core.session import DecisionOptions, run_lines
assert c.core_build() == "compiled (mypyc)", c.core_build()
brain = load_brain_dir("pipeline/samples/brain")
assert volunteer_context("user: ping Jordan Lee", brain)["count"] == 1
run_lines(["user: Did Galewright reply?", "assistant: not yet"], brain, options=DecisionOptions())
"""


def smoke_test() -> bool:
    """The compiled modules import and decide in a fresh interpreter; else they are removed."""
    import subprocess  # only after a build

    result = subprocess.run([sys.executable, "-c", SMOKE], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "VOLUNTEER_PURE_CORE": "0"})
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"build_core: the compiled core failed its smoke test ({last}); the core stays pure Python",
              file=sys.stderr)
    return result.returncode == 0


if __name__ == "__main__":
    sys.exit(main())
