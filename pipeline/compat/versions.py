"""The one version check: the installed faust-streaming, aiokafka and mode-streaming must be the
exact versions pinned in pyproject.toml, whatever the broker (``kafka://`` or ``tansu://``).

Every patch in :mod:`pipeline.compat` was written against those versions' internals; a patch also
checks the shape of its own target (:func:`pipeline.internals.require`), but a changed version is
refused before any of them runs, so an upgrade is a deliberate step: re-run the tests that show
each quirk and race (tests/integration/stream/test_tansu_quirks.py, tests/unit/compat/,
tests/reliability/test_crash.py --long) and then change the pins here and in pyproject.toml.
"""

from __future__ import annotations

from pipeline.internals import PINNED, CompatError, installed


def check_versions() -> None:
    """Raise :class:`CompatError` (one line naming every mismatch) unless the pins are installed."""
    wrong = [f"{dist} {installed(dist)} (expected {wanted})" for dist, wanted in PINNED.items()
             if installed(dist) != wanted]
    if wrong:
        raise CompatError("the patches in pipeline/compat were written for "
                          + ", ".join(f"{d}=={v}" for d, v in PINNED.items()) + "; found " + "; ".join(wrong)
                          + ". Re-check each patch (tests/unit/compat, tests/integration/stream/"
                          "test_tansu_quirks.py) before changing the pins.")
