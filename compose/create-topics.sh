#!/bin/sh
# Create the volunteer-stream topics with the partitions, replication and retention of the env
# files (volunteer.env, topics.env), or apply changed retention to topics that already exist.
# Runs in the apache/kafka image as the compose `topics` job. Idempotent.
set -eu

BIN=/opt/kafka/bin
BOOTSTRAP=${KAFKA_BOOTSTRAP:-kafka:9092}
PARTITIONS=${VOLUNTEER_TOPIC_PARTITIONS:-8}
REPLICATION=${VOLUNTEER_TOPIC_REPLICATION:-1}
MAX_BYTES=${MAX_MESSAGE_BYTES:-6291456}

ensure() {
  topic=$1
  retention=$2
  "$BIN/kafka-topics.sh" --bootstrap-server "$BOOTSTRAP" --create --if-not-exists --topic "$topic" \
    --partitions "$PARTITIONS" --replication-factor "$REPLICATION" \
    --config "retention.ms=$retention" --config "max.message.bytes=$MAX_BYTES"
  "$BIN/kafka-configs.sh" --bootstrap-server "$BOOTSTRAP" --alter --entity-type topics --entity-name "$topic" \
    --add-config "retention.ms=$retention,max.message.bytes=$MAX_BYTES" >/dev/null
  have=$("$BIN/kafka-topics.sh" --bootstrap-server "$BOOTSTRAP" --describe --topic "$topic" \
    | grep -c 'Partition: ' || true)
  if [ "$have" -lt "$PARTITIONS" ]; then
    echo "create-topics: $topic has $have partitions, VOLUNTEER_TOPIC_PARTITIONS asks for $PARTITIONS;" \
         "raise them deliberately (docs/deployment.md, 'Scaling out')" >&2
  fi
  echo "create-topics: $topic ready ($have partitions, retention.ms=$retention)"
}

ensure "${VOLUNTEER_TOPIC_TURNS:-turns}" "${TURNS_RETENTION_MS:-86400000}"
ensure "${VOLUNTEER_TOPIC_VOLUNTEERED:-volunteered}" "${VOLUNTEERED_RETENTION_MS:-604800000}"
ensure "${VOLUNTEER_TOPIC_DLQ:-turns-dlq}" "${DLQ_RETENTION_MS:-1209600000}"
ensure "${VOLUNTEER_TOPIC_PAGE_OPENS:-page-opens}" "${PAGE_OPENS_RETENTION_MS:-604800000}"
