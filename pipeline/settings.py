"""Service settings: flags, then ``VOLUNTEER_*`` environment variables, then these defaults.

One model for every command so that the worker, the CLI and the compose file agree on names.
Numeric decision knobs are kept *raw* (any float) and clamped by the core exactly as the
reference does, so settings tuned on gbrain carry over unchanged.

The model is a plain pydantic ``BaseModel`` that reads its variables itself
(:func:`pipeline.settings_env.environment`), the way pydantic-settings' ``BaseSettings`` with these
options reads them (names case-insensitive,
values passed to validation as the strings they are, defaults validated too). Importing
pydantic-settings cost every command about 0.25 s of CPU (asyncio, its dotenv, CLI and cloud
sources), half of a replay's start-up; ``tests/unit/test_settings.py`` compares this reader with
``BaseSettings`` on the same fields.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipeline.settings_env import environment

MAX_PORT = 65535

EMBEDDED_BROKER_SCHEME = "tansu"
"""A broker URL with this scheme names the embedded Tansu broker (``tansu://127.0.0.1:PORT``).

Only such a URL switches on the quirk handling (:mod:`topics.tansu_client` for the plain clients, the
``tansu://`` Faust transport of :mod:`pipeline.compat.tansu_transport` for the worker).
"""


_DEFAULT_PURGE_CRON = "17 3 * * *"


class Settings(BaseModel):
    """Everything a command needs to find its services and make its decisions.

    ``Settings(**values)``: the values given, else the environment's, else the defaults.
    """

    # validate_default: as BaseSettings does (a default passes its validators; ``4`` becomes 4.0)
    model_config = ConfigDict(extra="ignore", populate_by_name=True, validate_default=True)

    def __init__(self, **values: Any) -> None:
        super().__init__(**{**environment(type(self).model_fields), **values})

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
        default_factory=list,
        description="Slugs starting with any of these are never volunteered (comma-separated, or a JSON list).",
    )
    channel: str = Field("stream", description="Channel logged for turns that do not name one.")
    reflex: bool = Field(
        True, description="Harness turns get reflex pointers before the volunteered pages (off = pages only)."
    )
    reflex_max_pointers: float = Field(
        3, description="Reflex pointers per harness turn (no confidence gate); <1 or missing means 3, capped at 10."
    )
    hook_window_turns: float = Field(
        5, description="Rolling window of harness (hook) sessions: the reference hook's last 4 transcript turns "
                       "plus the prompt; clamped to 1..64 (floor).",
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
        4 * 3600.0, gt=0, description="Sessions idle longer than this are expired from the table."
    )
    brain_refresh_seconds: float = Field(3.0, gt=0, description="How often workers look for brain changes.")
    sink_batch_size: int = Field(500, ge=1, description="Max events per INSERT batch.")
    sink_flush_seconds: float = Field(0.02, gt=0, description="Max wait before a partial sink batch is written.")
    fetch_pause_ms: float = Field(
        5.0, ge=0, le=1000,
        description="Pause after a fetch that delivered records, so the next collects more: fewer, larger "
                    "broker requests under load (0 = fetch again at once).")
    fetch_wait_max_ms: int = Field(
        160, ge=0, le=1000,
        description="Embedded broker only: the fetch wait doubles after each fetch that found no records, up to "
                    "this, and is back at 20 ms once one finds records (fewer requests while idle; the first "
                    "record after a silence may wait up to it). 0 or 20 = a fixed 20 ms wait.")
    fetch_interval_ms: float = Field(
        100, ge=0, le=1000,
        description="Embedded broker only: under load, after a fetch that brought records the worker's next fetch waits "
                    "until up to this long after that one was sent, so it reads every partition once for what arrived "
                    "meanwhile (the embedded broker's cost of a fetch with records grows with the partitions' length, "
                    "not with the records; docs/performance.md, goal 2). How long depends on the records per second "
                    "the fetches find: nothing below VOLUNTEER_FETCH_INTERVAL_FROM_RATE, all of it from twice that, "
                    "and none while the worker has not taken the last fetch's records. Each hop through the broker "
                    "may wait up to it more (not the hooks' fast lane). 0 = off: fetch again as soon as "
                    "the records are taken. With 100 on 2 cores, 3,000 turns/s took 152-192 instead of 263-418 us of "
                    "CPU per turn (worker, broker and database) for a median of ~170 instead of ~40-80 ms; 500 turns/s "
                    "and bursts were unchanged (docs/performance.md, sessions 10 and 11).")
    fetch_interval_from_rate: float = Field(
        1500, ge=0, le=1_000_000,
        description="Embedded broker only: the records per second (all the worker's input topics) from which the "
                    "fetch interval starts; it grows with the rate to all of VOLUNTEER_FETCH_INTERVAL_MS at twice "
                    "this. Below it fetches are not held (500 turns/s keeps its latency). 0 = the whole interval "
                    "after every fetch with records, whatever the load.")
    consumer_in_loop: bool = Field(
        False, description="Run the worker's Kafka consumer on the worker's event loop, not in Faust's consumer "
                           "thread (no cross-thread hand-off per fetch and commit): less CPU per turn on a loaded "
                           "machine, no difference measured on a quiet one (docs/performance.md, goal 2).")
    direct_delivery: bool = Field(
        True, description="The window and sink agents take their records a fetch at a time straight from the "
                          "consumer, without Faust's per-record conductor, event and stream (less CPU per turn; "
                          "docs/performance.md, goal 2). Off: through Faust's stream, as before.")
    changelog_direct: bool = Field(
        True, description="A table recovery applies its changelog records a fetch at a time as they are fetched, "
                          "without Faust's per-record conductor, event, queue and recovery loop (a fresh worker "
                          "recovers a million sessions several times faster; docs/performance.md, \"A million "
                          "sessions\"). Off: through Faust's recovery loop, as before.")
    producer_batch_bytes: int = Field(
        262_144, ge=16_384, le=1_000_000,
        description="Most bytes of one partition's record batch in the worker's produce requests (Faust's "
                    "producer_max_batch_size, whose default is 16 KiB; keep it under the broker's largest "
                    "message, 1 MB by default). A 1,000-turn window batch saves ~70 KiB of session states a "
                    "partition: in 16 KiB batches that was ~40 produce requests a save (docs/performance.md, goal 2).")
    gc_young_threshold: int = Field(
        20_000, ge=0,
        description="The worker's garbage collector looks at its young generation after this many net allocations "
                    "(Python's default: 700) and at the middle one after 20 young collections (Python's: 10); the old "
                    "one as Python does, and a timer collects the young and middle ones when nothing was collected "
                    "for 30 s. Collections that found almost no garbage were a sixth of a burst's worker CPU; the "
                    "worker makes next to no cyclic garbage, so memory is the same (docs/performance.md, goal 2). "
                    "0: Python's own thresholds and no timer.")
    hook_fast_lane: bool = Field(
        True, description="The hook endpoint decides and saves a hook's turns itself when they are the next records "
                          "of their partition, instead of waiting for the window agent's fetch (docs/hooks.md, Speed).")
    purge_retention_days: float = Field(90, gt=0, description="Events older than this are purged.")
    purge_cron: str = Field(_DEFAULT_PURGE_CRON, description="Crontab (UTC) of the leader-only purge task.")
    purge_batch_size: int = Field(5000, ge=1, description="Rows deleted per purge statement.")
    web_port: int = Field(
        6066, ge=0, le=MAX_PORT,
        description="Port of the worker's web server, the hooks' endpoint (0 = any free one). A port that is "
                    "taken is a start-up error; hooks find the port in use through the worker registry.")
    web_host: str = Field(
        "127.0.0.1", description="Address the worker's web server binds (0.0.0.0 or a host address for "
                                 "workers on other hosts; then set a credential and TLS, docs/hooks.md).")
    web_advertised_url: str | None = Field(
        None, description="URL other workers and the hooks use to reach this one (registry and group "
                          "metadata); default http(s)://<web_host>:<port>, the host name when bound to all "
                          "addresses.")
    web_tls_certfile: str | None = Field(None, description="Certificate (PEM) the web server presents: "
                                                            "turns on HTTPS.")
    web_tls_keyfile: str | None = Field(None, description="Private key of web_tls_certfile.")
    web_tls_cafile: str | None = Field(
        None, description="CA bundle that verifies other workers' HTTPS when forwarding (and the hook's).")
    state_dir: str | None = Field(
        None, description="Per-user state: the hook credential, the worker registry, the hooks' state "
                          "(default $XDG_STATE_HOME/volunteer or ~/.local/state/volunteer).")
    hook_token: str | None = Field(
        None, repr=False, description="Shared secret of hooks and workers (at least 32 characters); default: "
                                      "the 0600 file <state_dir>/hook-token, created when missing.")
    metrics_port: int = Field(9464, ge=0, le=MAX_PORT, description="Prometheus metrics port (0 = off).")
    metrics_host: str = Field(
        "127.0.0.1", description="Address the metrics endpoint listens on (0.0.0.0 in a container)."
    )
    state_key: str | None = Field(
        None,
        description="AES-256 key (base64 of 32 bytes) sealing the session table's values; every worker of one app "
                    "id needs the same key. Unset: the key file.")
    state_key_file: str | None = Field(
        None,
        description="File holding the state key, created 0600 when absent (default "
                    "~/.local/state/volunteer/state.key; workers on one host share it).")
    state_seal: bool = Field(
        True,
        description="Write sealed (version 2) session values. Off: plain version-1 values, readable by releases "
                    "from before sealing; only while rolling an upgrade from such a release (docs/operations.md).")
    log_format: str = Field("auto", description="auto | json | console.")
    log_level: str = Field("INFO", description="Log level.")
    ready_max_lag: int = Field(
        10_000, ge=0,
        description="Readiness (/readyz): at most this many records behind on the partitions a worker owns.")

    # --- security (passed through to aiokafka / libpq) ------------------------------------
    kafka_security_protocol: str = Field("PLAINTEXT", description="PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL.")
    kafka_ssl_cafile: str | None = Field(None, description="CA bundle for broker TLS.")
    kafka_ssl_certfile: str | None = Field(None, description="Client certificate for broker mTLS.")
    kafka_ssl_keyfile: str | None = Field(None, description="Client key for broker mTLS.")
    kafka_sasl_mechanism: str | None = Field(None, description="PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512.")
    kafka_sasl_username: str | None = Field(None, description="SASL user name.")
    kafka_sasl_password: str | None = Field(None, description="SASL password.")

    @field_validator("exclude_slug_prefixes", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        """``a/,b/`` or ``["a/", "b/"]`` from the environment; a list from code passes through."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("["):
            import json

            try:
                return json.loads(text)
            except ValueError:
                raise ValueError("not a JSON list; use a comma-separated list or [\"a\", \"b\"]") from None
        return [part.strip() for part in text.split(",") if part.strip()]

    @field_validator("purge_cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        """Checked here, at start-up, so a bad crontab stops the worker before it joins the group."""
        if value == _DEFAULT_PURGE_CRON:
            return value  # valid; and importing croniter costs every command ~0.1 s of CPU
        from croniter import croniter

        if not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a crontab expression (five fields, e.g. '17 3 * * *')")
        return value

    def with_overrides(self, **overrides: Any) -> Settings:
        """A copy with the given (non-None) values replaced: how CLI flags win over env and defaults.

        The copy is validated like the environment is, so ``sink_batch_size=0`` from code or a
        flag is refused the same way ``VOLUNTEER_SINK_BATCH_SIZE=0`` is.
        """
        values = {k: v for k, v in overrides.items() if v is not None}
        if not values:
            return self
        unknown = sorted(set(values) - set(type(self).model_fields))
        if unknown:
            raise TypeError(f"unknown setting(s): {', '.join(unknown)}")
        return type(self).model_validate({**self.model_dump(), **values})

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
