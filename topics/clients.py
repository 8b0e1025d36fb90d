"""aiokafka clients built from :class:`Settings`: bootstrap servers, TLS/SASL and the embedded quirks.

Every plain aiokafka client of the project (feed, watch, topic admin, tests, bench) comes from here,
so security settings and the Tansu work-arounds are applied in one way everywhere.
"""

from __future__ import annotations

import ssl
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context

from pipeline.settings import Settings
from topics import tansu_client


def ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if not settings.kafka_security_protocol.upper().endswith("SSL"):
        return None
    context: ssl.SSLContext = create_ssl_context(
        cafile=settings.kafka_ssl_cafile, certfile=settings.kafka_ssl_certfile, keyfile=settings.kafka_ssl_keyfile
    )
    return context


def connection_kwargs(settings: Settings) -> dict[str, Any]:
    """Bootstrap servers and security, shared by producers, consumers and the admin client."""
    kwargs: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "security_protocol": settings.kafka_security_protocol.upper(),
    }
    context = ssl_context(settings)
    if context is not None:
        kwargs["ssl_context"] = context
    if settings.kafka_sasl_mechanism:
        kwargs["sasl_mechanism"] = settings.kafka_sasl_mechanism
        kwargs["sasl_plain_username"] = settings.kafka_sasl_username
        kwargs["sasl_plain_password"] = settings.kafka_sasl_password
    return kwargs


def make_producer(settings: Settings, **overrides: Any) -> AIOKafkaProducer:
    """A producer (not started). Defaults favour throughput: small linger, batching."""
    kwargs: dict[str, Any] = {"linger_ms": 5, "max_batch_size": 256 * 1024, "acks": 1}
    kwargs.update(connection_kwargs(settings))
    kwargs.update(tansu_client.producer_kwargs(settings.broker_is_embedded))
    kwargs.update(overrides)
    return AIOKafkaProducer(**kwargs)


def make_consumer(settings: Settings, *topics: str, **overrides: Any) -> AIOKafkaConsumer:
    """A consumer (not started); with ``group_id`` in ``overrides`` it joins that group.

    On the embedded broker call :func:`start_consumer` rather than ``start()`` so a clean stop
    leaves the group (quirk 2).
    """
    kwargs: dict[str, Any] = {"enable_auto_commit": False, "auto_offset_reset": "earliest"}
    kwargs.update(connection_kwargs(settings))
    kwargs.update(tansu_client.consumer_kwargs(settings.broker_is_embedded))
    kwargs.update(overrides)
    return AIOKafkaConsumer(*topics, **kwargs)


async def start_consumer(consumer: AIOKafkaConsumer, settings: Settings) -> AIOKafkaConsumer:
    await consumer.start()
    if settings.broker_is_embedded:
        tansu_client.fix_leave_group(consumer)
    return consumer


def make_admin(settings: Settings) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(request_timeout_ms=30_000, **connection_kwargs(settings))


def faust_credentials(settings: Settings) -> Any:
    """Faust ``broker_credentials`` for TLS / SASL, or None for plaintext."""
    import faust

    protocol = settings.kafka_security_protocol.upper()
    context = ssl_context(settings)
    if settings.kafka_sasl_mechanism:
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username or "",
            password=settings.kafka_sasl_password or "",
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=context,
        )
    if protocol == "SSL" and context is not None:
        return faust.SSLCredentials(context)
    return None
