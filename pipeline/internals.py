"""The one guard for every use of a third-party internal, and the port the Faust shell reads them through.

The patches themselves live in :mod:`pipeline.compat` (installed once, at the app's start-up), and
only the start-up may import compat (docs/architecture.md, "Layers"). Two things here let the rest
of the code stay off third-party internals without importing it:

- :class:`Internals`, the few reads of Faust and aiokafka internals that the agents and the worker
  metrics need (the producer's batch path, the memory store's key partitions, the table store and
  consumer without creating them). :func:`pipeline.compat.install` fills it in (:func:`use`);
  :func:`internals` hands it out, and refuses loudly when the start-up has not run.
- :class:`CompatError` and :func:`require`, the one guard. The only code outside compat that
  touches a third-party internal, the plain aiokafka clients' Tansu work-arounds in
  :mod:`topics.tansu_client`, uses it too: those clients run in processes that never start an app
  (feed, watch, doctor, the client library).

Every patch guards the same way: a patch first checks that its target has the shape it expects and, if not, raises
:class:`CompatError` with one line naming the patch, what is missing and the installed versions.
Nothing warns and carries on, nothing skips silently: a silent skip is how a library upgrade
would bring back the data loss a patch exists to prevent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, MutableMapping, Sequence
from importlib import metadata
from typing import Any, Protocol

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


def require(patch: str, target: object, *names: str, methods: tuple[str, ...] = (),
            own_methods: tuple[str, ...] = ()) -> None:
    """Raise :class:`CompatError` unless ``target`` has every attribute in ``names``, a callable
    for every name in ``methods`` and, for a class whose methods a patch overrides, each of
    ``own_methods`` defined on that class itself (not only inherited from a base)."""
    missing = [name for name in names if not hasattr(target, name)]
    missing += [f"{name}()" for name in methods if not callable(getattr(target, name, None))]
    missing += [f"own {name}()" for name in own_methods if not callable(vars(target).get(name))]
    if missing:
        raise CompatError(f"compat patch {patch}: {_label(target)} has no {', '.join(missing)} "
                          f"({installed_versions()}; written for the versions pinned in pyproject.toml)")


class DirectFeed(Protocol):
    """A topic's records in batches, past Faust's per-record path (:mod:`pipeline.compat.direct_delivery`)."""

    def __aiter__(self) -> AsyncIterator[list[Any]]:
        """Batches of Faust messages (``key``, ``value``, ``partition``, ``offset``), each as soon as one is queued."""
        ...

    async def ack(self, batch: Sequence[Any]) -> None:
        """Acknowledge a batch taken from the feed."""
        ...


class Internals(Protocol):
    """The Faust / aiokafka internals the shell reads (implemented by :mod:`pipeline.compat.faust_internals`)."""

    def batch_producer(self, faust_producer: Any) -> Any:
        """The aiokafka producer behind a Faust producer (``create_batch`` / ``send_batch``)."""
        ...

    async def partitions(self, producer: Any, topic: str) -> tuple[list[int], list[int]]:
        """``topic``'s partitions and its available ones, from the producer's (awaited) metadata."""
        ...

    def partitioner(self, producer: Any) -> Callable[[bytes | None, list[int], list[int]], int]:
        """The producer's own partitioner (the partition ``send`` would choose for a key)."""
        ...

    def key_partitions(self, store: Any) -> MutableMapping[Any, int] | None:
        """The table store's key -> partition map (None: a store kind that keeps none)."""
        ...

    def store_values(self, store: Any) -> MutableMapping[Any, Any] | None:
        """The table store's own key -> value mapping, read without Faust's per-key layers, and
        written by the session table's recovery apply as Faust's memory store writes it (None: a
        store kind that keeps none in memory)."""
        ...

    def created_store(self, table: Any) -> Any | None:
        """The table's store if it exists yet, without creating it (safe from another thread)."""
        ...

    def created_consumer(self, app: Any) -> Any | None:
        """The Faust app's consumer if it exists yet, without creating it."""
        ...

    def committed_offsets(self, consumer: Any) -> dict[Any, int | None]:
        """The offsets the Faust consumer last committed, per partition."""
        ...

    def newest_fetch_ms(self, consumer: Any) -> int | None:
        """Wall-clock ms of the newest Fetch answer for any partition the Faust consumer owns (None: none yet)."""
        ...

    def direct_feed(self, app: Any, topic: Any, max_batch: int) -> DirectFeed:
        """Register the one reader of ``topic``'s records, handed over in batches of up to ``max_batch``."""
        ...


_current: Internals | None = None


def use(implementation: Internals) -> None:
    """Install the implementation (called by :func:`pipeline.compat.install`)."""
    global _current
    _current = implementation


def internals() -> Internals:
    """The installed implementation; :class:`CompatError` if the app's start-up has not run."""
    if _current is None:
        raise CompatError("compat: the Faust internals are not installed in this process; "
                          "pipeline.compat.install(app, settings) runs at the app's start-up (pipeline/app.py)")
    return _current
