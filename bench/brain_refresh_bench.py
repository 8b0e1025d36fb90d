"""Brain refresh cost for workers on a synthetic 100k-page brain in PostgreSQL.

Measures: the import (``volunteer brain import`` path), a no-change re-import, one
``brain_version`` poll, a full reload (``load_brain_snapshot``: query + BrainIndex.build), and the
time from a page edit being committed to a worker holding a brain that contains it.

    python bench/brain_refresh_bench.py [--pages 100000] [--database-url URL]
"""

from __future__ import annotations

import argparse
import random
import resource
import time

import psycopg

from pipeline.core.op import volunteer_context
from pipeline.core.pages import Page
from pipeline.embedded.postgres import EmbeddedPostgres
from sinks.brain_import import import_brain
from sinks.brain_pg import brain_version, load_brain_snapshot
from sinks.schema import migrate

FIRST = ["Alice", "Bob", "Carmen", "Dmitri", "Eun-ji", "Farah", "Goran", "Hana", "Ines", "Jonas", "Kofi", "Lena"]
LAST = ["Example", "Sample", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Haselaar", "Barkholz", "Nerger", "Renner"]
KINDS = [("people", "person"), ("companies", "company"), ("projects", "project"), ("concepts", "concept")]


def synthetic_pages(n: int, seed: int = 7) -> list[Page]:
    rng = random.Random(seed)
    pages = []
    for i in range(1, n + 1):
        folder, kind = KINDS[i % len(KINDS)]
        title = f"{rng.choice(FIRST)} {rng.choice(LAST)}{i}" if kind == "person" else f"{rng.choice(LAST)} {kind.title()}{i}"
        slug = f"{folder}/{title.lower().replace(' ', '-')}"
        frontmatter: dict[str, object] = {"type": kind, "tags": ["synthetic"]}
        if i % 3 == 0:
            frontmatter["aliases"] = [f"{title.split()[0]} {i}", f"alias-{i}"]
        if i % 4 == 0:
            frontmatter["summary"] = f"{title} is a synthetic page number {i}."
        body = (
            f"---\nsource: bench\n---\n# {title}\n\n{title} works on things. "
            + " ".join(rng.choice(LAST) for _ in range(40))
            + ".\n\n- a fact\n- another fact\n"
        )
        pages.append(Page(id=i, slug=slug, title=title, type=kind, compiled_truth=body, frontmatter=frontmatter,
                          deleted=i % 500 == 0))
    return pages


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(label: str, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    result = fn(*args, **kwargs)
    print(f"{label:<44} {time.perf_counter() - started:8.3f} s")
    return result


async def _refresh_with_ticker(url: str, version: str | None, tick_s: float = 0.005) -> tuple[float, list[float]]:
    """Run ``BrainHolder.refresh`` (the worker's path: version poll, load in a thread, swap) while a
    ticker on the same event loop records how late each of its 5 ms sleeps wakes up: what a stream
    on that loop would see. Returns (seconds the refresh took, lateness of each tick in ms)."""
    import asyncio

    from pipeline.agents.brain_holder import BrainHolder

    # The worker's situation: a loaded brain of the same size that the refresh replaces (and frees).
    holder = BrainHolder(load_brain_snapshot(url).index, version=version, database_url=url)
    late: list[float] = []
    done = False

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while not done:
            due = loop.time() + tick_s
            await asyncio.sleep(tick_s)
            late.append((loop.time() - due) * 1000)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    swapped = await holder.refresh()
    took = time.perf_counter() - started
    done = True
    await task
    if not swapped:
        raise RuntimeError("the refresh did not install a new brain")
    return took, late


def figures(url: str, pages_n: int = 100_000) -> dict[str, float]:
    """The suite's figures for a ``pages_n``-page brain in PostgreSQL (``url`` must be migrated)."""
    import asyncio

    pages = synthetic_pages(pages_n)
    started = time.perf_counter()
    import_brain(url, pages)
    import_s = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as conn:
        brain_version(conn)
        started = time.perf_counter()
        for _ in range(200):
            brain_version(conn)
        poll_ms = (time.perf_counter() - started) / 200 * 1000
    took, late = asyncio.run(_refresh_with_ticker(url, "none"))
    late.sort()
    return {"pages": pages_n, "import_s": import_s, "poll_ms": poll_ms, "reload_s": took,
            "tick_late_p50_ms": late[len(late) // 2], "tick_late_p99_ms": late[int(0.99 * (len(late) - 1))],
            "tick_late_max_ms": late[-1], "ticks": len(late)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--polls", type=int, default=500)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()

    pages = synthetic_pages(args.pages)
    pg = None if args.database_url else EmbeddedPostgres().start()
    url = args.database_url or (pg.url if pg else "")
    try:
        migrate(url)
        report = timed(f"import {args.pages} pages (one transaction)", import_brain, url, pages)
        print(f"    {report.summary()}")
        again = timed("re-import, nothing changed", import_brain, url, pages)
        print(f"    {again.pages_unchanged} unchanged")

        with psycopg.connect(url, autocommit=True) as conn:
            brain_version(conn)
            started = time.perf_counter()
            for _ in range(args.polls):
                brain_version(conn)
            per_poll = (time.perf_counter() - started) / args.polls
        print(f"{'brain_version poll (open connection)':<44} {per_poll * 1000:8.3f} ms")
        started = time.perf_counter()
        for _ in range(20):
            brain_version(url)
        print(f"{'brain_version poll (new connection each)':<44} {(time.perf_counter() - started) / 20 * 1000:8.3f} ms")

        before = rss_mb()
        snap = timed("full reload: load_brain_snapshot", load_brain_snapshot, url)
        print(f"    {snap.pages} pages, {snap.alias_rows} alias rows, version {snap.version}, "
              f"peak RSS {rss_mb():.0f} MB (+{rss_mb() - before:.0f} MB)")
        started = time.perf_counter()
        result = volunteer_context(f"user: did {pages[0].title} reply?", snap.index)
        print(f"{'one op decision on the loaded brain':<44} {(time.perf_counter() - started) * 1000:8.3f} ms "
              f"({result['count']} page(s))")

        # edit -> detect -> reload
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("UPDATE pages SET title = 'Renamed Page' WHERE id = 2")
        started = time.perf_counter()
        changed = brain_version(url) != snap.version
        fresh = load_brain_snapshot(url)
        visible = bool(fresh.index.ids_with_title("renamed page"))
        print(f"{'edit committed -> detected -> reloaded':<44} {time.perf_counter() - started:8.3f} s "
              f"(detected={changed}, visible={visible})")
    finally:
        if pg is not None:
            pg.close()


if __name__ == "__main__":
    main()
