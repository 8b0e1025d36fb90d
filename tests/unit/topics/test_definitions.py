"""Topic definitions and client settings derived from Settings (no broker needed)."""

from __future__ import annotations

from pipeline.settings import load_settings
from topics.clients import connection_kwargs
from topics.definitions import topic_specs


def test_topics_follow_the_settings() -> None:
    specs = topic_specs(load_settings(topic_turns="in", topic_volunteered="out", topic_dlq="dead",
                                      topic_page_opens="opens", topic_partitions=12, topic_replication=3))
    assert [(s.name, s.partitions, s.replication) for s in specs.all()] == [
        ("in", 12, 3), ("out", 12, 3), ("dead", 12, 3), ("opens", 12, 3)]
    defaults = topic_specs(load_settings())
    assert [s.name for s in defaults.all()] == ["turns", "volunteered", "turns-dlq", "page-opens"]


def test_connection_settings() -> None:
    plain = connection_kwargs(load_settings(broker="kafka://a:9092, kafka://b:9093"))
    assert plain == {"bootstrap_servers": ["a:9092", "b:9093"], "security_protocol": "PLAINTEXT"}
    sasl = connection_kwargs(load_settings(broker="kafka://a:9092", kafka_security_protocol="sasl_plaintext",
                                           kafka_sasl_mechanism="SCRAM-SHA-256", kafka_sasl_username="u",
                                           kafka_sasl_password="p"))
    assert sasl["security_protocol"] == "SASL_PLAINTEXT"
    assert (sasl["sasl_mechanism"], sasl["sasl_plain_username"], sasl["sasl_plain_password"]) == (
        "SCRAM-SHA-256", "u", "p")
    assert "ssl_context" not in sasl
    tls = connection_kwargs(load_settings(broker="kafka://a:9093", kafka_security_protocol="SSL"))
    assert tls["ssl_context"] is not None


def test_embedded_urls_become_host_port() -> None:
    settings = load_settings(broker="tansu://127.0.0.1:40000")
    assert settings.broker_is_embedded
    assert connection_kwargs(settings)["bootstrap_servers"] == ["127.0.0.1:40000"]
