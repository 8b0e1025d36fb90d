"""Brain directories: defaults, alias sources, and one-line errors naming file and line."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipeline.braindir import BrainDirError, iter_brain_dir, load_brain_dir
from pipeline.core.op import volunteer_context
from pipeline.core.pages import Page


def write(path: Path, rows: list[object]) -> None:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")


def test_defaults_and_line_order_ids(tmp_path: Path) -> None:
    write(tmp_path / "pages.jsonl", [{"slug": "people/a-b", "title": "A B"}, {"id": 10, "slug": "x", "title": "X", "type": "company", "source_id": "team", "deleted": True}])
    pages, aliases = iter_brain_dir(tmp_path)
    assert aliases is None
    assert (pages[0].id, pages[0].source_id, pages[0].type, pages[0].compiled_truth, pages[0].deleted) == (1, "default", "person", "", False)
    assert (pages[1].id, pages[1].source_id, pages[1].deleted) == (10, "team", True)


def test_aliases_from_frontmatter_or_top_level_when_no_alias_file(tmp_path: Path) -> None:
    write(tmp_path / "pages.jsonl", [
        {"slug": "people/swami-x", "title": "Swami X", "frontmatter": {"aliases": "Swami, SX"}},
        {"slug": "people/bo-y", "title": "Bo Y", "aliases": ["Bobo"]},
    ])
    brain = load_brain_dir(tmp_path)
    assert brain.alias_row_count == 3
    assert [p["slug"] for p in volunteer_context("user: ask Swami and Bobo", brain)["pages"]] == ["people/swami-x", "people/bo-y"]


def test_alias_file_is_the_table_as_given(tmp_path: Path) -> None:
    write(tmp_path / "pages.jsonl", [{"slug": "people/swami-x", "title": "Swami X", "frontmatter": {"aliases": ["Swami"]}}])
    write(tmp_path / "aliases.jsonl", [{"alias_norm": "sx", "slug": "people/swami-x"}])
    brain = load_brain_dir(tmp_path)
    assert volunteer_context("user: ask Swami", brain)["pages"] == []
    assert len(volunteer_context("user: ask SX", brain)["pages"]) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"slug": "a", "title": "A"}\n{"slug": "b", "title": "B"\n', "pages.jsonl:2: not valid JSON"),
        (b'{"slug": "a"}\n', "pages.jsonl:1: field 'title' is required"),
        (b'{"slug": "", "title": "A"}\n', "pages.jsonl:1: field 'slug' must not be empty"),
        (b'{"slug": "a", "title": 5}\n', "pages.jsonl:1: field 'title' must be str, got int"),
        (b'\n\n{"slug": "a", "title": "A", "id": true}\n', "pages.jsonl:3: field 'id' must be int, got bool"),
        (b'[1]\n', "pages.jsonl:1: expected a JSON object"),
        (b'{"slug": "a", "title": "A"}\n{"slug": "a", "title": "B"}\n', "pages.jsonl:2: slug 'a' in source 'default' already defined on line 1"),
        (b'{"slug": "a", "title": "A", "id": 1}\n{"slug": "b", "title": "B", "id": 1}\n', "pages.jsonl:2: page id 1 already used on line 1"),
        (b'{"slug": "a", "title": "caf\xe9"}\n', "pages.jsonl:1: not valid UTF-8"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "pages.jsonl").write_bytes(content)
    with pytest.raises(BrainDirError) as info:
        iter_brain_dir(tmp_path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_alias_line(tmp_path: Path) -> None:
    write(tmp_path / "pages.jsonl", [{"slug": "a", "title": "A"}])
    (tmp_path / "aliases.jsonl").write_bytes(b'{"alias_norm": "x"}\n')
    with pytest.raises(BrainDirError, match=r"aliases.jsonl:1: field 'slug' is required"):
        iter_brain_dir(tmp_path)


def test_missing_directory_or_pages(tmp_path: Path) -> None:
    with pytest.raises(BrainDirError, match="not a directory"):
        iter_brain_dir(tmp_path / "nope")
    with pytest.raises(BrainDirError, match=r"pages\.jsonl: missing"):
        iter_brain_dir(tmp_path)


def test_every_field_of_a_well_typed_line_and_the_errors_of_an_ill_typed_one(tmp_path: Path) -> None:
    """Well-typed lines become pages without per-field checks; an ill-typed field still gets its
    one-line error from the checked path."""
    full = {"id": 7, "slug": "people/a", "title": "A", "source_id": "s", "type": "company", "compiled_truth": "body",
            "frontmatter": {"summary": "S"}, "aliases": ["Al"], "deleted_at": "2024-01-01"}
    write(tmp_path / "pages.jsonl", [full, {"slug": "b", "title": "", "source_id": None, "deleted": False}])
    pages, _ = iter_brain_dir(tmp_path)
    assert pages == [Page(7, "people/a", "A", "s", "company", "body", {"summary": "S", "aliases": ["Al"]}, True),
                     Page(2, "b", "", "default", "person", "", {}, False)]
    for field, value, message in (("id", 7.0, "field 'id' must be int"), ("id", True, "field 'id' must be int"),
                                  ("source_id", "", "field 'source_id' must not be empty"),
                                  ("deleted", 1, "field 'deleted' must be bool"),
                                  ("aliases", 3, "field 'aliases' must be a list or a string")):
        write(tmp_path / "pages.jsonl", [{**full, "frontmatter": {}, field: value}])
        with pytest.raises(BrainDirError, match=message):
            iter_brain_dir(tmp_path)
