"""Reading a folder of Markdown pages (pure: files in, Page objects out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sinks.markdown_brain import MarkdownBrainError, page_from_markdown, read_markdown_dir, split_frontmatter

FOLDER = Path(__file__).resolve().parents[2] / "fixtures" / "markdown_brain"


def test_fixture_folder() -> None:
    pages = read_markdown_dir(FOLDER, "notes")
    assert [p.slug for p in pages] == [
        "companies/widget-co", "notes/old-idea", "notes/王芳", "people/alice-example", "people/bob-sample",
        "projects/solstice",
    ]
    assert [p.id for p in pages] == [1, 2, 3, 4, 5, 6]
    assert {p.source_id for p in pages} == {"notes"}
    by_slug = {p.slug: p for p in pages}

    alice = by_slug["people/alice-example"]
    assert (alice.title, alice.type, alice.deleted) == ("Alice Example", "person", False)
    assert alice.frontmatter["aliases"] == ["Ally", "Al E."]
    assert alice.frontmatter["updated"] == "2026-07-11"  # a YAML date becomes JSON-able text
    assert alice.frontmatter["summary"] == "Alice is an early founder and seed investor."
    assert alice.compiled_truth.startswith("# Alice Example\n\nAlice Example led")
    assert "DROP TABLE pages;--" in alice.compiled_truth

    bob = by_slug["people/bob-sample"]
    assert (bob.title, bob.type, bob.frontmatter["aliases"]) == ("Bob Sample", "person", "Bobby")  # type from folder

    widget = by_slug["companies/widget-co"]
    assert widget.frontmatter["aliases"] == "Widget Co, WidgetCo"
    assert widget.compiled_truth == "---\nsource: import\n---\nThe Widget Company makes widgets. Founded in 2019.\n"

    solstice = by_slug["projects/solstice"]
    assert (solstice.title, solstice.type, solstice.frontmatter) == ("Project Solstice", "project", {})

    assert by_slug["notes/old-idea"].deleted is True
    assert by_slug["notes/old-idea"].type == "concept"
    assert by_slug["notes/王芳"].title == "王芳"


def test_title_falls_back_to_file_name() -> None:
    page = page_from_markdown("just text\n", "misc/some-page.md", 1)
    assert (page.slug, page.title, page.type, page.compiled_truth) == ("misc/some-page", "some-page", "concept", "just text\n")


def test_non_string_title_and_type_are_text() -> None:
    page = page_from_markdown("---\ntitle: 1458\ntype: 7\n---\nbody", "x.md", 3)
    assert (page.title, page.type, page.id) == ("1458", "7", 3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\ntitle: [unclosed\n---\nbody", "not valid YAML"),
        ("---\ntitle: x\nbody without end", "never closed"),
        ("---\n- a\n- b\n---\nbody", "must be a YAML mapping"),
    ],
)
def test_bad_frontmatter_names_the_file(text: str, message: str) -> None:
    with pytest.raises(MarkdownBrainError, match=message) as info:
        split_frontmatter(text, "people/x.md")
    assert str(info.value).startswith("people/x.md")


def test_bad_folders(tmp_path: Path) -> None:
    with pytest.raises(MarkdownBrainError, match=r"no \.md files"):
        read_markdown_dir(tmp_path)
    with pytest.raises(MarkdownBrainError, match="not a directory"):
        read_markdown_dir(tmp_path / "missing")
    (tmp_path / "bad.md").write_bytes(b"caf\xe9")
    with pytest.raises(MarkdownBrainError, match=r"bad\.md: not valid UTF-8"):
        read_markdown_dir(tmp_path)


def test_crlf_files_parse_like_lf(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_bytes(b"---\r\ntitle: A\r\n---\r\nBody.\r\n")
    (page,) = read_markdown_dir(tmp_path)
    assert (page.title, page.compiled_truth) == ("A", "Body.\n")
