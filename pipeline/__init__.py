"""volunteer-stream: push-based context over Kafka/Faust; see docs/architecture.md."""
