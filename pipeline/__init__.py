"""volunteer-stream: push-based context over Kafka/Faust; see docs/architecture.md."""

from pipeline import corebuild as _corebuild

_corebuild.select()  # decides, at the first import of a core module, between the compiled build and the plain one
