"""Fixtures of the stream tests: settings on this module's broker with unique topics and a migrated
database of their own, and a factory for real worker processes (stopped after the test)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.settings import Settings
from tests.integration.stream.harness import WorkerProc, run, worker_env
from tests.services.broker import TestNames, settings_for
from topics.definitions import ensure_topics


@pytest.fixture
def pipeline_settings(module_broker_url: str, names: TestNames, migrated_database_url: str) -> Settings:
    settings = settings_for(module_broker_url, names, database_url=migrated_database_url, topic_partitions=4)
    run(ensure_topics(settings))
    return settings


WorkerFactory = Callable[..., WorkerProc]


@pytest.fixture
def start_worker(pipeline_settings: Settings, tmp_path: Path) -> Iterator[WorkerFactory]:
    """``start_worker(*cli_args, settings=None, **VOLUNTEER_env)`` -> a started :class:`WorkerProc`."""
    workers: list[WorkerProc] = []

    def start(*args: str, settings: Settings | None = None, data_dir: Path | None = None,
              **env: Any) -> WorkerProc:
        index = len(workers)
        chosen = settings or pipeline_settings
        extra = {key: str(value) for key, value in env.items()}
        worker = WorkerProc(worker_env(chosen, data_dir or tmp_path / f"data{index}", **extra),
                            tmp_path / f"worker{index}.log", list(args))
        workers.append(worker)
        return worker.start()

    yield start
    for worker in workers:
        worker.__exit__()
