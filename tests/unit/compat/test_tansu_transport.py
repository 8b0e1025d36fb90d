"""The ``tansu://`` Faust transport's guards, with Faust's real classes: each overridden internal
must exist before the scheme is registered, and exactly-once is refused on the embedded broker only.
(What each quirk does on a live broker: tests/integration/stream/test_tansu_quirks.py.)"""

from __future__ import annotations

import faust
import pytest
from faust.transport.drivers import aiokafka as faust_aiokafka

from pipeline.compat import tansu_transport
from pipeline.internals import CompatError


@pytest.mark.parametrize("name", ["_highwaters", "_create_worker_consumer", "on_start"])
def test_a_missing_overridden_internal_is_refused(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.delattr(faust_aiokafka.AIOKafkaConsumerThread, name)
    with pytest.raises(CompatError, match=rf"compat patch tansu-transport: .*AIOKafkaConsumerThread has no own {name}\(\)"):
        tansu_transport.install()


def test_the_scheme_is_registered_once_the_internals_are_there() -> None:
    from faust.transport import by_url

    tansu_transport.install()
    assert by_url("tansu://127.0.0.1:1") is tansu_transport.TansuTransport
    assert by_url("kafka://127.0.0.1:1") is faust_aiokafka.Transport


def test_exactly_once_is_refused_on_the_embedded_broker_only() -> None:
    with pytest.raises(CompatError, match="exactly-once processing needs idempotent"):
        tansu_transport.check_app(faust.App("eo", broker="tansu://127.0.0.1:1", processing_guarantee="exactly_once"))
    tansu_transport.check_app(faust.App("eo-k", broker="kafka://127.0.0.1:1", processing_guarantee="exactly_once"))
