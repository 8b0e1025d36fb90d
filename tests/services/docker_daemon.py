"""Whether the test services may come from testcontainers: does a Docker daemon answer?

The broker and the PostgreSQL fixtures both ask this, second in their order of sources (after the
environment variables, before the embedded services). One copy, so they cannot drift apart.
"""

from __future__ import annotations

import os


def docker_available() -> bool:
    """A cheap, silent check: no ``DOCKER_HOST`` and no local socket means no daemon, without
    importing the Docker client; otherwise the daemon must answer a ping within 2 s."""
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker

        client = docker.from_env(timeout=2)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False
