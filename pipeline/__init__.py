"""volunteer-stream: push-based context over Kafka/Faust; see docs/architecture.md."""

from pipeline import corebuild as _corebuild

_corebuild.select()  # before anything imports pipeline.core: the compiled build, or the plain modules
