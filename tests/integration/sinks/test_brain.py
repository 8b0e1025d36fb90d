"""Brain import into PostgreSQL, loading it back for workers, and the change detector."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from pipeline.braindir import iter_brain_dir, load_brain_dir
from pipeline.cli import main
from pipeline.core.brain import BrainIndex
from pipeline.core.op import InvalidParams, volunteer_context
from pipeline.core.pages import Page
from pipeline.core.session import DecisionOptions, run_lines
from sinks.brain_import import BrainImportError, import_brain
from sinks.brain_pg import BrainRefresher, brain_version, load_brain, load_brain_snapshot
from sinks.db import with_database
from sinks.markdown_brain import read_markdown_dir
from sinks.schema import migrate

from .test_schema import load_gbrain

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
CONFORMANCE = FIXTURES / "conformance"
MARKDOWN = FIXTURES / "markdown_brain"


def _cases(name: str) -> list[dict[str, Any]]:
    with (CONFORMANCE / name).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@pytest.fixture(scope="session")
def conformance_pg_url(postgres_server_url: str) -> Iterator[str]:
    """One database per session holding the imported conformance brain (tests only read it)."""
    name = "vt_conformance_brain"
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    url = with_database(postgres_server_url, name)
    migrate(url)
    pages, aliases = iter_brain_dir(CONFORMANCE / "brain")
    import_brain(url, pages, aliases)
    yield url
    with psycopg.connect(postgres_server_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _run_op(case: dict[str, Any], brain: BrainIndex) -> dict[str, Any]:
    opts = case["opts"]
    try:
        result = volunteer_context(
            case["window"], brain, source_ids=opts.get("source_ids", ["default"]),
            prior_context=opts.get("prior_context"), max_pages=opts.get("max_pages"),
            min_confidence=opts.get("min_confidence"), lexical_arms=opts.get("lexical_arms", True),
        )
    except InvalidParams as exc:
        return exc.to_dict()
    return {"window_turns": result["window_turns"], "pages": result["pages"]}


def _run_watch(case: dict[str, Any], brain: BrainIndex) -> dict[str, Any]:
    flags = case["flags"]
    options = DecisionOptions(
        window_turns=flags.get("window_turns", 4), max_pages=flags.get("max_pages"),
        min_confidence=flags.get("min_confidence"), lexical_arms=flags.get("lexical_arms", True),
    )
    turns, emitted = run_lines(case["lines"], brain, source_id=flags.get("source", "default"), options=options)
    return {"turns": turns, "emissions": [{"turn": turn, **page.to_dict()} for turn, page in emitted]}


# ----------------------------------------------------------------------------- conformance brain


def test_conformance_brain_round_trips(conformance_pg_url: str) -> None:
    dir_pages, dir_aliases = iter_brain_dir(CONFORMANCE / "brain")
    assert dir_aliases is not None
    snap = load_brain_snapshot(conformance_pg_url)
    assert (snap.pages, snap.alias_rows) == (3121, 1372)
    assert snap.index.live_page_count == 3121 - 57
    with psycopg.connect(conformance_pg_url) as conn:
        rows = conn.execute(
            "SELECT id, slug, source_id, type, title, compiled_truth, frontmatter, deleted_at IS NOT NULL "
            "FROM pages ORDER BY id"
        ).fetchall()
        alias_rows = conn.execute("SELECT source_id, alias_norm, slug FROM page_aliases").fetchall()
    # ids follow the directory's insertion order, every field is stored verbatim
    assert [
        Page(id=r[0], slug=r[1], source_id=r[2], type=r[3], title=r[4], compiled_truth=r[5], frontmatter=r[6], deleted=r[7])
        for r in rows
    ] == dir_pages
    assert sorted(alias_rows) == sorted((a.source_id, a.alias_norm, a.slug) for a in dir_aliases)


def test_pg_brain_gives_reference_decisions_on_every_op_case(conformance_pg_url: str) -> None:
    pg_brain = load_brain(conformance_pg_url)
    dir_brain = load_brain_dir(CONFORMANCE / "brain")
    mismatches = []
    for case in _cases("cases-op.jsonl"):
        expected = case.get("expect_post_snapshot", case["expect"])
        got = _run_op(case, pg_brain)
        if got != expected or got != _run_op(case, dir_brain):
            mismatches.append(case["id"])
    assert mismatches == []


def test_pg_brain_gives_reference_decisions_on_every_watch_case(conformance_pg_url: str) -> None:
    pg_brain = load_brain(conformance_pg_url)
    mismatches = [
        c["id"] for c in _cases("cases-watch.jsonl") if _run_watch(c, pg_brain) != c.get("expect_post_snapshot", c["expect"])
    ]
    assert mismatches == []


def test_source_scoped_load(conformance_pg_url: str) -> None:
    snap = load_brain_snapshot(conformance_pg_url, ["team", "archive"])
    assert snap.pages == 166 + 25
    assert snap.index.sources <= {"team", "archive"}


# ----------------------------------------------------------------------------- import behaviour


def _pages(url: str) -> dict[str, tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT source_id || ':' || slug, id, type, title, compiled_truth, frontmatter, deleted_at IS NOT NULL "
            "FROM pages ORDER BY id"
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def _aliases(url: str) -> set[tuple[str, str, str]]:
    with psycopg.connect(url) as conn:
        return {tuple(r) for r in conn.execute("SELECT source_id, alias_norm, slug FROM page_aliases")}  # type: ignore[misc]


def test_reimport_changes_nothing(conformance_pg_url: str, migrated_database_url: str) -> None:
    pages, aliases = iter_brain_dir(CONFORMANCE / "brain")
    first = import_brain(migrated_database_url, pages, aliases)
    assert (first.pages_inserted, first.pages_updated, first.pages_deleted) == (3121, 0, 57)
    assert first.alias_rows_inserted == 1372
    before, version = _pages(migrated_database_url), brain_version(migrated_database_url)
    again = import_brain(migrated_database_url, pages, aliases)
    assert (again.pages_inserted, again.pages_updated, again.pages_unchanged) == (0, 0, 3121)
    assert (again.alias_rows_inserted, again.alias_rows_removed) == (0, 0)
    assert _pages(migrated_database_url) == before
    assert brain_version(migrated_database_url) == version


def test_markdown_import_aliases_deletion_and_updates(migrated_database_url: str, tmp_path: Path) -> None:
    url = migrated_database_url
    report = import_brain(url, read_markdown_dir(MARKDOWN))
    assert (report.pages_total, report.pages_inserted, report.pages_deleted) == (6, 6, 1)
    pages = _pages(url)
    alice = pages["default:people/alice-example"]
    assert alice[1:3] == ("person", "Alice Example")
    assert alice[4]["updated"] == "2026-07-11" and alice[4]["tags"] == ["founder", "investor"]
    assert "DROP TABLE pages;--" in alice[3]
    assert pages["default:notes/old-idea"][5] is True
    assert _aliases(url) == {
        ("default", "ally", "people/alice-example"), ("default", "al e.", "people/alice-example"),
        ("default", "bobby", "people/bob-sample"), ("default", "widget co", "companies/widget-co"),
        ("default", "widgetco", "companies/widget-co"),
    }
    # the decision core sees the Markdown brain as written
    brain = load_brain(url)
    result = volunteer_context("user: did Ally reply about the Widget Co deal?", brain)
    assert [(p["slug"], p["arm"]) for p in result["pages"]] == [
        ("people/alice-example", "alias"), ("companies/widget-co", "alias"),
    ]
    assert result["pages"][0]["synopsis"] == "Alice is an early founder and seed investor."

    # edit one page: new title, alias set replaced; undelete another; the rest untouched
    folder = tmp_path / "brain"
    folder.mkdir()
    for src in MARKDOWN.rglob("*.md"):
        dest = folder / src.relative_to(MARKDOWN)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "people" / "bob-sample.md").write_text("---\ntitle: Robert Sample\naliases: [Rob]\n---\nBob.\n")
    (folder / "notes" / "old-idea.md").write_text("---\ntitle: Old Idea\n---\nBack again.\n")
    version = brain_version(url)
    second = import_brain(url, read_markdown_dir(folder))
    assert (second.pages_inserted, second.pages_updated, second.pages_unchanged) == (0, 2, 4)
    assert (second.alias_rows_inserted, second.alias_rows_removed) == (1, 1)
    after = _pages(url)
    assert after["default:people/bob-sample"][0] == pages["default:people/bob-sample"][0]  # same id
    assert after["default:people/bob-sample"][2] == "Robert Sample"
    assert after["default:notes/old-idea"][5] is False
    assert ("default", "rob", "people/bob-sample") in _aliases(url)
    assert ("default", "bobby", "people/bob-sample") not in _aliases(url)
    assert brain_version(url) != version


def test_source_option_rehomes_and_refuses_merging_sources(migrated_database_url: str) -> None:
    report = import_brain(migrated_database_url, read_markdown_dir(MARKDOWN), source_id="notes")
    assert report.sources == ["notes"]
    assert {k.split(":")[0] for k in _pages(migrated_database_url)} == {"notes"}
    pages, aliases = iter_brain_dir(CONFORMANCE / "brain")
    with pytest.raises(BrainImportError, match="would merge two pages"):
        import_brain(migrated_database_url, pages, aliases, source_id="one")
    assert len(_pages(migrated_database_url)) == 6  # nothing written by the refused import


def test_import_into_a_gbrain_brain_registers_new_sources(database_url: str) -> None:
    load_gbrain(database_url)
    migrate(database_url)
    report = import_brain(database_url, read_markdown_dir(MARKDOWN), source_id="fresh")
    assert report.pages_inserted == 6
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM sources WHERE id = 'fresh'").fetchone() == (1,)
        # gbrain's own pages and aliases are untouched
        assert conn.execute("SELECT count(*) FROM pages WHERE source_id <> 'fresh'").fetchone() == (4,)
        assert conn.execute("SELECT count(*) FROM page_aliases WHERE source_id = 'default'").fetchone() == (3,)
    brain = load_brain(database_url, ["default"])
    assert brain.live_page("default", "people/alice-example") is not None
    assert brain.live_page("default", "people/gone") is None  # soft-deleted in gbrain


def test_unstorable_page_is_refused_with_its_name(migrated_database_url: str) -> None:
    bad = [Page(id=1, slug="people/x", title="X\x00", type="person")]
    with pytest.raises(BrainImportError, match="people/x"):
        import_brain(migrated_database_url, bad)


# ----------------------------------------------------------------------------- change detection


def _exec(url: str, *statements: str) -> None:
    with psycopg.connect(url) as conn:
        for stmt in statements:
            conn.execute(stmt)


def test_brain_version_tracks_every_brain_change_and_nothing_else(migrated_database_url: str) -> None:
    url = migrated_database_url
    versions = [brain_version(url)]

    def changed(*statements: str) -> bool:
        _exec(url, *statements)
        versions.append(brain_version(url))
        return versions[-1] != versions[-2]

    assert versions[0].startswith("c")
    assert changed("INSERT INTO pages (slug, type, title) VALUES ('a', 'person', 'A')")
    assert changed("INSERT INTO pages (slug, type, title) VALUES ('b', 'person', 'B'), ('c', 'person', 'C')")
    assert changed("UPDATE pages SET title = 'A2' WHERE slug = 'a'")
    assert changed("UPDATE pages SET frontmatter = '{\"summary\": \"s\"}' WHERE slug = 'a'")
    assert changed("UPDATE pages SET deleted_at = now() WHERE slug = 'b'")
    assert changed("DELETE FROM pages WHERE slug = 'c'")
    assert changed("INSERT INTO page_aliases (source_id, alias_norm, slug) VALUES ('default', 'x', 'a')")
    assert changed("UPDATE page_aliases SET alias_norm = 'y'")
    assert changed("DELETE FROM page_aliases")
    assert changed("TRUNCATE page_aliases")
    assert changed("TRUNCATE pages")
    # not brain changes: reads, retrieval bookkeeping, no-op updates, events, a rolled-back write
    _exec(url, "INSERT INTO pages (slug, type, title) VALUES ('d', 'person', 'D')")
    versions.append(brain_version(url))
    assert not changed("SELECT count(*) FROM pages")
    assert not changed("UPDATE pages SET last_retrieved_at = now(), updated_at = now()")
    assert not changed("UPDATE pages SET title = title")
    assert not changed(
        "INSERT INTO context_volunteer_events (source_id, slug, confidence, match_arm) VALUES ('default', 'd', 0.9, 'title')"
    )
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO pages (slug, type, title) VALUES ('e', 'person', 'E')")
        conn.rollback()
    assert brain_version(url) == versions[-1]


def test_one_bump_per_transaction_visible_only_after_commit(migrated_database_url: str) -> None:
    url = migrated_database_url
    before = brain_version(url)
    with psycopg.connect(url) as writer:
        for i in range(50):
            writer.execute("INSERT INTO pages (slug, type, title) VALUES (%s, 'person', 'T')", (f"s{i}",))
        assert brain_version(url) == before  # not committed yet: readers see the old brain and version
        writer.commit()
    after = brain_version(url)
    assert int(after[1:]) == int(before[1:]) + 1


def test_snapshot_version_matches_its_data(migrated_database_url: str) -> None:
    url = migrated_database_url
    _exec(url, "INSERT INTO pages (slug, type, title) VALUES ('a', 'person', 'Alice Example')")
    snap = load_brain_snapshot(url)
    assert snap.version == brain_version(url)
    assert snap.index.live_page("default", "a") is not None


def test_fallback_without_triggers_uses_table_statistics(migrated_database_url: str) -> None:
    url = migrated_database_url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER volunteer_stream_brain_ins_del ON pages")
    before = brain_version(url)
    assert "/s" in before
    _exec(url, "INSERT INTO pages (slug, type, title) VALUES ('z', 'person', 'Z')")
    deadline = time.monotonic() + 30  # statistics reach other sessions within ~1 s (PG 15), bounded here
    while brain_version(url) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert brain_version(url) != before
    # migrate puts the trigger back, and the counter takes over again
    migrate(url)
    assert "/s" not in brain_version(url)


def test_refresher_reloads_only_on_change(migrated_database_url: str) -> None:
    url = migrated_database_url
    installed: list[int] = []

    async def run() -> tuple[bool, bool, bool]:
        refresher = BrainRefresher(url, on_change=lambda snap: installed.append(snap.pages))
        await refresher.start()
        unchanged = await refresher.check()
        _exec(url, "INSERT INTO pages (slug, type, title) VALUES ('people/alice', 'person', 'Alice Example')")
        reloaded = await refresher.check()
        assert refresher.index.live_page("default", "people/alice") is not None
        refresher.database_url = "postgresql://postgres@127.0.0.1:1/none?connect_timeout=1"
        failed = await refresher.check()  # database gone: keeps the loaded brain
        assert refresher.index.live_page("default", "people/alice") is not None
        return unchanged, reloaded, failed

    assert asyncio.run(run()) == (False, True, False)
    assert installed == [0, 1]


# ----------------------------------------------------------------------------- CLI


def test_brain_import_command(migrated_database_url: str) -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["brain", "import", str(MARKDOWN), "--database-url", migrated_database_url,
                                  "--source", "md"])
    assert result.exit_code == 0, result.output
    assert "imported 6 page(s) into source(s) md: 6 new, 0 updated, 0 unchanged, 1 marked deleted" in result.output
    info = runner.invoke(main, ["brain", "info", "--database-url", migrated_database_url])
    assert info.exit_code == 0, info.output
    assert "md: 5 page(s), 1 deleted, 5 alias row(s)" in info.output


def test_brain_import_command_migrates_an_empty_database(database_url: str) -> None:
    result = CliRunner().invoke(main, ["brain", "import", str(CONFORMANCE / "brain"), "--database-url", database_url])
    assert result.exit_code == 0, result.output
    assert "3121 page(s) into source(s) archive, default, team: 3121 new" in result.output


def test_brain_import_command_bad_input(tmp_path: Path, migrated_database_url: str) -> None:
    (tmp_path / "pages.jsonl").write_text('{"slug": "a"}\n')
    result = CliRunner().invoke(main, ["brain", "import", str(tmp_path), "--database-url", migrated_database_url])
    assert result.exit_code == 1
    assert "pages.jsonl:1: field 'title' is required" in result.output


def test_a_worker_reload_swaps_in_a_brain_whose_alias_view_is_already_built(migrated_database_url: str) -> None:
    """``BrainHolder.refresh`` loads in a thread and builds the resolver's lazy alias view there too,
    so the first batch after a reload does not build it on the event loop."""
    from pipeline.agents.brain_holder import BrainHolder

    url = migrated_database_url
    _exec(url, "INSERT INTO pages (slug, type, title) VALUES ('people/ada', 'person', 'Ada Lovelace')")
    holder = BrainHolder.from_database(url)
    assert asyncio.run(holder.refresh()) is False  # nothing changed yet
    _exec(url, "INSERT INTO page_aliases (source_id, alias_norm, slug) VALUES ('default', 'countess', 'people/ada')")
    before = holder.index
    assert asyncio.run(holder.refresh()) is True
    assert holder.index is not before
    assert holder.index._alias_view is not None  # built while loading, not on first use
    assert holder.index.alias_targets("countess") == {"default": ("people/ada",)}
