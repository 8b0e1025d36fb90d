"""``volunteer brain``: put a brain into PostgreSQL (``import``) and look at what is there (``info``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pipeline.cli.options import database_option, fail_on_db_error, resolve_database_url


@click.group(name="brain")
def brain() -> None:
    """Manage the brain (gbrain-compatible pages + page_aliases) in PostgreSQL."""


@brain.command(name="import")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@database_option
@click.option(
    "--source", "source_id", default=None, metavar="ID",
    help="Source to import into. Markdown folder: default 'default'. Brain directory: "
    "default is each page's own source_id; with --source everything goes into ID.",
)
@click.option("--migrate/--no-migrate", "run_migrate", default=True, show_default=True,
              help="Create missing tables first (same as 'volunteer migrate').")
def import_cmd(path: Path, database_url: str | None, source_id: str | None, run_migrate: bool) -> None:
    """Import PATH: a brain directory (pages.jsonl [+ aliases.jsonl]) or a folder of Markdown pages.

    \b
    Brain directory: the format of tests/fixtures/conformance/brain (see docs/database.md);
    aliases.jsonl, when present, is the alias table as given.
    Markdown folder: every *.md below PATH is a page; slug = relative path without .md,
    YAML frontmatter title/type/aliases/summary, body = compiled_truth.

    \b
    Pages are upserted on (source, slug); unchanged pages are left alone; each page's alias
    set is replaced; pages marked deleted get deleted_at. One transaction: running workers
    switch to the new brain at once. Pages already in the database but not in PATH are kept.

    \b
    A page whose slug holds a control character, a backtick or '-->', whose title or body is
    too large, whose frontmatter is too large or uses YAML anchors, or that is a symlink to
    outside PATH, is refused with one line naming it (stderr); the other pages are imported
    (docs/security.md, "Imports").

    
    Examples:
      volunteer brain import tests/fixtures/conformance/brain
      volunteer brain import ~/notes --source notes
    """
    from pipeline.braindir import PAGES_FILE, BrainDirError, iter_brain_dir
    from sinks.brain_import import BrainImportError, import_brain
    from sinks.markdown_brain import MarkdownBrainError, read_markdown_dir
    from sinks.schema import migrate

    refused: list[str] = []
    try:
        if (path / PAGES_FILE).is_file():
            pages, aliases = iter_brain_dir(path, refused)
            kind = "brain directory"
        else:
            pages, aliases = read_markdown_dir(path, source_id or "default", refused), None
            kind = "Markdown folder"
    except (BrainDirError, MarkdownBrainError) as exc:
        for line in refused:
            click.echo(line, err=True)
        raise click.ClickException(str(exc)) from None
    for line in refused:
        click.echo(line, err=True)
    click.echo(f"read {len(pages)} page(s) from {kind} {path}" + (f", {len(refused)} refused" if refused else ""),
               err=True)

    url = resolve_database_url(database_url)
    interactive = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if interactive:
            click.echo(f"\rwriting pages: {done}/{total}", nl=False, err=True)

    with fail_on_db_error(url):
        if run_migrate:
            migrate(url)
        try:
            report = import_brain(url, pages, aliases, source_id=source_id, progress=progress)
        except BrainImportError as exc:
            raise click.ClickException(str(exc)) from None
    if interactive:
        click.echo("", err=True)
    for line in report.refused:
        click.echo(line, err=True)
    click.echo(f"imported {report.summary()}")


@brain.command(name="info")
@database_option
def info_cmd(database_url: str | None) -> None:
    """Pages, alias rows and the change version of the brain in the database, per source."""
    import psycopg

    from sinks.brain_pg import brain_version

    url = resolve_database_url(database_url)
    with fail_on_db_error(url), psycopg.connect(url, autocommit=True, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT source_id, count(*) FILTER (WHERE deleted_at IS NULL), count(*) FILTER (WHERE deleted_at IS NOT NULL) "
            "FROM pages GROUP BY source_id ORDER BY source_id"
        ).fetchall()
        aliases = conn.execute("SELECT source_id, count(*) FROM page_aliases GROUP BY source_id").fetchall()
        alias_count = {str(s): int(n) for s, n in aliases}
        for source, live, deleted in rows:
            click.echo(f"{source}: {live} page(s), {deleted} deleted, {alias_count.get(str(source), 0)} alias row(s)")
        if not rows:
            click.echo("no pages")
        click.echo(f"version: {brain_version(conn)}")
