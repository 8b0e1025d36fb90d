"""Service settings: flags, then ``VOLUNTEER_*`` environment variables, then these defaults.

One model for every command so that the worker, the CLI and the compose file agree on names.
Numeric decision knobs are kept *raw* (any float) and clamped by the core exactly as the
reference does, so settings tuned on gbrain carry over unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

EMBEDDED_BROKER_SCHEME = "tansu"
"""A broker URL with this scheme names the embedded Tansu broker (``tansu://127.0.0.1:PORT``).

Only such a URL switches on the quirk handling in :mod:`pipeline.embedded.tansu_quirks`.
"""


class Settings(BaseSettings):
    """Everything a command needs to find its services and make its decisions."""

    model_config = SettingsConfigDict(env_prefix="VOLUNTEER_", extra="ignore", populate_by_name=True)

    # --- services -------------------------------------------------------------------------
    broker: str = Field(
        "kafka://127.0.0.1:9092",
        description="Kafka bootstrap servers, comma-separated (kafka://host:port); tansu://host:port is the embedded broker.",
    )
    database_url: str = Field(
        "postgresql://postgres@127.0.0.1:5432/postgres", description="libpq URL of the brain / events database."
    )

    # --- topics ---------------------------------------------------------------------------
    topic_turns: str = Field("turns", description="Topic of incoming Turn records (key = session id).")
    topic_volunteered: str = Field("volunteered", description="Topic of Volunteered page records.")
    topic_dlq: str = Field("turns-dlq", description="Dead-letter topic for records that cannot be processed.")
    topic_page_opens: str = Field("page-opens", description="Topic of page-open feedback events.")
    topic_partitions: int = Field(8, ge=1, description="Partitions for topics the service creates.")
    topic_replication: int = Field(1, ge=1, description="Replication factor for topics the service creates.")

    # --- decision knobs (raw; clamped by the core like the reference) ---------------------
    window_turns: float = Field(4, description="Rolling window per session; clamped to 1..64 (floor).")
    max_pages: float | None = Field(None, description="Pages per turn; <1 or missing means 3, capped at 5.")
    min_confidence: float | None = Field(None, description="Gate; outside [0, 1] or missing means 0.7.")
    source: str = Field("default", description="Brain source id turns resolve against unless they name one.")
    lexical_arms: bool = Field(True, description="Weak-alias, surname and CJK arms (gbrain's kill switch).")
    exclude_slug_prefixes: list[str] = Field(
        default_factory=list, description="Slugs starting with any of these are never volunteered."
    )
    channel: str = Field("stream", description="Channel logged for turns that do not name one.")
    reflex: bool = Field(
        True, description="Harness turns get reflex pointers before the volunteered pages (off = pages only)."
    )
    reflex_max_pointers: float = Field(
        3, description="Reflex pointers per harness turn (no confidence gate); <1 or missing means 3, capped at 10."
    )
    reflex_stream: bool = Field(
        False, description="Give ordinary (non-harness) turns the same turn context: pointers too, on volunteered."
    )

    # --- input limits ---------------------------------------------------------------------
    max_text_bytes: int = Field(
        5_000_000, ge=1, description="Turns whose UTF-8 text is larger go to the DLQ (reference stdin cap)."
    )
    max_session_id_chars: int = Field(256, ge=1, description="Longer session ids go to the DLQ.")

    # --- worker ---------------------------------------------------------------------------
    app_id: str = Field("volunteer-stream", description="Faust app id = consumer group id.")
    data_dir: str = Field("./.volunteer-data", description="Worker's local data directory.")
    session_idle_seconds: float = Field(
        7 * 24 * 3600.0, gt=0, description="Sessions idle longer than this are expired from the table."
    )
    brain_refresh_seconds: float = Field(3.0, gt=0, description="How often workers look for brain changes.")
    sink_batch_size: int = Field(500, ge=1, description="Max events per INSERT batch.")
    sink_flush_seconds: float = Field(0.02, gt=0, description="Max wait before a partial sink batch is written.")
    fetch_pause_ms: float = Field(
        5.0, ge=0, le=1000,
        description="Pause after a fetch that delivered records, so the next collects more: fewer, larger "
                    "broker requests under load (0 = fetch again at once).")
    purge_retention_days: float = Field(90, gt=0, description="Events older than this are purged.")
    purge_cron: str = Field("17 3 * * *", description="Crontab (UTC) of the leader-only purge task.")
    purge_batch_size: int = Field(5000, ge=1, description="Rows deleted per purge statement.")
    web_port: int = Field(6066, ge=0, description="Faust web port (0 = pick a free one).")
    metrics_port: int = Field(9464, ge=0, description="Prometheus metrics port (0 = off).")
    metrics_host: str = Field(
        "127.0.0.1", description="Address the metrics endpoint listens on (0.0.0.0 in a container)."
    )
    log_format: str = Field("auto", description="auto | json | console.")
    log_level: str = Field("INFO", description="Log level.")

    # --- security (passed through to aiokafka / libpq) ------------------------------------
    kafka_security_protocol: str = Field("PLAINTEXT", description="PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL.")
    kafka_ssl_cafile: str | None = Field(None, description="CA bundle for broker TLS.")
    kafka_ssl_certfile: str | None = Field(None, description="Client certificate for broker mTLS.")
    kafka_ssl_keyfile: str | None = Field(None, description="Client key for broker mTLS.")
    kafka_sasl_mechanism: str | None = Field(None, description="PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512.")
    kafka_sasl_username: str | None = Field(None, description="SASL user name.")
    kafka_sasl_password: str | None = Field(None, description="SASL password.")

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given (non-None) values replaced: how CLI flags win over env and defaults."""
        values = {k: v for k, v in overrides.items() if v is not None}
        return self.model_copy(update=values)

    @property
    def broker_is_embedded(self) -> bool:
        return self.broker.strip().lower().startswith(EMBEDDED_BROKER_SCHEME + "://")

    @property
    def bootstrap_servers(self) -> list[str]:
        """``host:port`` entries for aiokafka, whatever scheme the URL used."""
        servers = []
        for part in self.broker.split(","):
            part = part.strip()
            if "://" in part:
                part = part.split("://", 1)[1]
            if part:
                servers.append(part.rstrip("/"))
        return servers


def load_settings(**overrides: Any) -> Settings:
    """Defaults < environment < explicit overrides (CLI flags)."""
    return Settings().with_overrides(**overrides)
