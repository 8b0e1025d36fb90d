"""The one guard for every use of a third-party internal: :class:`CompatError` and :func:`require`.

The patches themselves live in :mod:`pipeline.compat` (installed once, at the app's start-up). The
only other users of third-party internals are the plain aiokafka clients' Tansu work-arounds in
:mod:`topics.tansu_client`, which run in processes that never start an app (feed, watch, doctor,
the client library) and may not import compat (docs/architecture.md, "Layers"). Both guard the
same way: a patch first checks that its target has the shape it expects and, if not, raises
:class:`CompatError` with one line naming the patch, what is missing and the installed versions.
Nothing warns and carries on, nothing skips silently: a silent skip is how a library upgrade
would bring back the data loss a patch exists to prevent.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

PINNED: Mapping[str, str] = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0", "mode-streaming": "0.7.1"}
"""The versions whose internals are patched; pinned exactly in pyproject.toml and constraints.txt."""


class CompatError(RuntimeError):
    """A patched third-party internal is not what the patch was written against."""


def installed(dist: str) -> str:
    """The installed version of ``dist``, or ``"not installed"``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def installed_versions() -> str:
    """``faust-streaming 0.15.3, aiokafka 0.14.0, mode-streaming 0.7.1`` as installed now."""
    return ", ".join(f"{dist} {installed(dist)}" for dist in PINNED)


def _label(target: object) -> str:
    if isinstance(target, type):
        return f"{target.__module__}.{target.__qualname__}"
    kind = type(target)
    return f"{kind.__module__}.{kind.__qualname__} instance"


def require(patch: str, target: object, *names: str, methods: tuple[str, ...] = ()) -> None:
    """Raise :class:`CompatError` unless ``target`` has every attribute in ``names`` and a callable
    for every name in ``methods``."""
    missing = [name for name in names if not hasattr(target, name)]
    missing += [f"{name}()" for name in methods if not callable(getattr(target, name, None))]
    if missing:
        raise CompatError(f"compat patch {patch}: {_label(target)} has no {', '.join(missing)} "
                          f"({installed_versions()}; written for the versions pinned in pyproject.toml)")
