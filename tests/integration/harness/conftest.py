"""The hook tests' real worker (embedded broker, PostgreSQL, sample brain), shared with the harness tests."""

from tests.integration.hook.conftest import hook_database, hook_settings, worker, worker_brain

__all__ = ["hook_database", "hook_settings", "worker", "worker_brain"]
