"""Types of the optional C scanner ``pipeline/core/_cscan.c`` (see ``pipeline.core.extract.scan_text``)."""

from collections.abc import Set as AbstractSet
from typing import Any

REGEX_VERSION: str

def scan(text: str, /) -> tuple[list[str], list[str], list[bool], list[str], list[str]]: ...
def ascii_surface(surface: str, stopwords: AbstractSet[str], common_words: AbstractSet[str], /) -> Any: ...
def class_table() -> bytes: ...
