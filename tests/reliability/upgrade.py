"""The previous release of this repository, installed from git into its own environment.

Why: a rolling upgrade runs both versions in one consumer group, so the test needs the old code as
a separate installation, not a flag of the new one. :func:`previous_release` extracts the commit
(``git archive``, no checkout of the working tree) into a temporary folder and makes a virtualenv
for it:

- when no package of the project venv differs from the version the old commit's
  ``constraints.txt`` pins (newer commits may add packages, or drop some, but not change old pins), the venv gets no packages of its own: a ``.pth``
  file puts the old tree first and the project venv's site-packages after it, which takes well
  under a second;
- otherwise the old tree is installed with pip from its own constraints (the pip cache makes a
  repeat fast).

Either way ``python -m pipeline`` in that venv runs the old code: the new tree is never on its path
(the project's editable-install hook is a ``.pth`` file, which a path listed in a ``.pth`` does
not run).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import sysconfig
import tarfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from tests.integration.stream.harness import ROOT

PREVIOUS_RELEASE = os.environ.get("VOLUNTEER_UPGRADE_FROM", "dd17c92")
"""The last commit whose stop landed on ``main`` before this work (override for later releases)."""


@dataclass(frozen=True)
class Release:
    commit: str
    tree: Path
    python: Path
    same_dependencies: bool

    def command(self, *args: str) -> list[str]:
        return [str(self.python), "-m", "pipeline", *args]


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True).stdout


def pins_installed(constraints: Path) -> bool:
    """Whether no package installed here differs from the version the old release pins. A pin whose
    package is not installed any more (a dropped tool) does not count: if the old code imported it,
    its workers would fail to start and the test with them, loudly."""
    for line in constraints.read_text().splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if not sep:
            continue
        try:
            if metadata.version(name.strip()) != version.strip():
                return False
        except metadata.PackageNotFoundError:
            continue
    return True


def previous_release(into: Path, commit: str = PREVIOUS_RELEASE) -> Release:
    full = _git("rev-parse", "--verify", f"{commit}^{{commit}}").decode().strip()
    tree = into / f"release-{full[:7]}"
    tree.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(_git("archive", "--format=tar", full)), mode="r:") as archive:
        archive.extractall(tree, filter="data")
    same = pins_installed(tree / "constraints.txt")
    venv = into / f"venv-{full[:7]}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip" if same else "--upgrade-deps", str(venv)],
                   check=True, capture_output=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    if same:
        (site / "volunteer_release.pth").write_text(f"{tree}\n{sysconfig.get_paths()['purelib']}\n")
    else:
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c",
                        str(tree / "constraints.txt"), str(tree)], check=True, cwd=tree)
    probe = subprocess.run([str(python), "-c", "import pipeline, sys; print(pipeline.__file__)"], check=True,
                           capture_output=True, text=True, cwd="/").stdout.strip()
    assert probe.startswith(str(tree if same else site)), f"the old environment imports {probe}"
    return Release(full, tree, python, same)
