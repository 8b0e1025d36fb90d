"""Fixtures of the reliability tests: settings with unique topics on a real broker, a migrated
database of their own, the conformance brain, and a factory of real ``volunteer worker`` processes
(stopped after the test, whatever happened)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.braindir import load_brain_dir
from pipeline.core.brain import BrainIndex
from pipeline.settings import Settings
from sinks.db import with_database
from tests.integration.stream.harness import CONFORMANCE_BRAIN, WorkerProc, run, worker_env
from tests.services.broker import settings_for
from tests.services.postgres import _create_database, _drop_database
from topics.definitions import ensure_topics

WorkerFactory = Callable[..., WorkerProc]


@pytest.fixture(scope="session")
def conformance_brain() -> BrainIndex:
    return load_brain_dir(CONFORMANCE_BRAIN)


@pytest.fixture
def reliability_settings(module_broker_url: str, names: Any, migrated_database_url: str) -> Settings:
    settings = settings_for(module_broker_url, names, database_url=migrated_database_url, topic_partitions=4)
    run(ensure_topics(settings))
    return settings


@pytest.fixture(scope="module")
def module_database_url(postgres_server_url: str, _migrated_template: str) -> Iterator[str]:
    """A migrated database shared by one module's tests (for fixtures that run a scenario once)."""
    name = _create_database(postgres_server_url, template=_migrated_template)
    try:
        yield with_database(postgres_server_url, name)
    finally:
        _drop_database(postgres_server_url, name)


class Workers:
    """Starts worker processes with the given settings; kills whatever is left at teardown."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: list[WorkerProc] = []

    def start(self, settings: Settings, *args: str, brain: Path | None = CONFORMANCE_BRAIN,
              **env: Any) -> WorkerProc:
        index = len(self.started)
        extra = {key: str(value) for key, value in env.items()}
        extra.setdefault("VOLUNTEER_METRICS_PORT", "0")
        cli = [*args] + (["--brain", str(brain)] if brain is not None else [])
        worker = WorkerProc(worker_env(settings, self.root / f"data{index}", **extra),
                            self.root / f"worker{index}.log", cli)
        self.started.append(worker)
        return worker.start()

    def close(self) -> None:
        for worker in self.started:
            worker.__exit__()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(tmp_path)
    yield pool
    pool.close()


@pytest.fixture(scope="module")
def module_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    pool = Workers(tmp_path_factory.mktemp("workers"))
    yield pool
    pool.close()
