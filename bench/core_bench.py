"""Decision-core speed: replay (watch semantics) and op throughput, per-stage cost, brain build.

Prints figures only; nothing is asserted. One process, one core, brain index built once.

    .venv/bin/python bench/core_bench.py            # conformance corpus + synthetic 100k-page brain
    .venv/bin/python bench/core_bench.py --pages 20000 --sessions 500

Figures (see docs/performance.md, "Decision core"):
- replay turns/s on the 450 conformance watch sessions, first pass (cold caches) and steady state,
  through ``step`` and through ``replay_lines`` (JSON decoding of Turn records included);
- the same on a synthetic brain of ``--pages`` pages with generated sessions that name its pages;
- op mode (``volunteer_context`` on the 450 conformance op windows): calls/s and window turns/s;
- per-stage microseconds per turn: extract, merge, resolve, gate, and synopsis per page;
- 100k-page brain: index build CPU seconds, its memory, replay turns per CPU-second, each as a ratio
  to issue 15's target; and loading the same brain from a brain directory.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from pipeline.braindir import load_brain_dir  # noqa: E402
from pipeline.core import extract as extract_mod  # noqa: E402
from pipeline.core.brain import BrainIndex  # noqa: E402
from pipeline.core.extract import extract_candidates  # noqa: E402
from pipeline.core.gate import candidates_by_norm, gate  # noqa: E402
from pipeline.core.op import volunteer_context  # noqa: E402
from pipeline.core.pages import Page  # noqa: E402
from pipeline.core.resolve import resolve  # noqa: E402
from pipeline.core.session import DecisionOptions, SessionState, parse_watch_line, step  # noqa: E402
from pipeline.core.synopsis import safe_synopsis  # noqa: E402
from pipeline.core.window import merge_window  # noqa: E402
from pipeline.replay import replay_lines  # noqa: E402

CONFORMANCE = ROOT / "tests" / "fixtures" / "conformance"
Session = tuple[str, DecisionOptions, str, list[tuple[str, str]]]  # (id, options, source, turns)


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * resource.getpagesize()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def clear_text_caches(brain: BrainIndex | None = None) -> None:
    """Empty the memo caches so a pass measures first sight of every surface, word and query."""
    from pipeline.core import op as op_mod
    from pipeline.core import resolve as resolve_mod

    for cache in (extract_mod._surface_cache, extract_mod._handle_cache, extract_mod._weak_cache,
                  extract_mod._word_cache, extract_mod._text_memo, extract_mod._long_memo, op_mod._window_memo,
                  resolve_mod._relevance_memo):
        cache.clear()
    resolve_mod._codes.clear()
    resolve_mod._pointers.clear()
    resolve_mod._bare_pointers.clear()
    resolve_mod._row_facts.clear()
    if brain is not None:
        brain._query_cache.clear()
        brain._synopsis.clear()
        brain._title_norm.clear()


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_sessions(sessions: list[Session], brain: BrainIndex) -> int:
    turns = 0
    for _, options, source, session_turns in sessions:
        state = SessionState()
        for role, text in session_turns:
            step(state, role, text, brain, source_id=source, options=options)
            turns += 1
    return turns


def turn_records(sessions: list[Session]) -> list[bytes]:
    lines = []
    for sid, _, source, session_turns in sessions:
        for i, (role, text) in enumerate(session_turns, 1):
            lines.append(orjson.dumps({"session_id": sid, "role": role, "text": text, "turn": i, "source_id": source}))
    return lines


def report_replay(label: str, sessions: list[Session], brain: BrainIndex, repeats: int = 3) -> None:
    clear_text_caches(brain)  # first pass: no surface, word, query or synopsis seen before
    start = time.perf_counter()
    cold_turns = run_sessions(sessions, brain)
    cold = cold_turns / (time.perf_counter() - start)
    warm_s = min(timed(lambda: run_sessions(sessions, brain)) for _ in range(repeats))
    warm = cold_turns / warm_s
    lines = turn_records(sessions)
    options = sessions[0][1]
    lines_s = min(timed(lambda: replay_lines(lines, brain, options=options)) for _ in range(repeats))
    print(f"  {label}: {len(sessions)} sessions, {cold_turns} turns")
    print(f"    replay via step, first pass (cold caches) : {cold:10,.0f} turns/s  ({1e6 / cold:6.1f} µs/turn)")
    print(f"    replay via step, steady state             : {warm:10,.0f} turns/s  ({1e6 / warm:6.1f} µs/turn)")
    print(f"    replay_lines (JSON Turn records decoded)  : {cold_turns / lines_s:10,.0f} turns/s")


def conformance_sessions() -> list[Session]:
    out = []
    for line in (CONFORMANCE / "cases-watch.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        flags = case["flags"]
        options = DecisionOptions(
            window_turns=flags.get("window_turns", 4),
            max_pages=flags.get("max_pages"),
            min_confidence=flags.get("min_confidence"),
            lexical_arms=flags.get("lexical_arms", True),
        )
        turns = [t for t in map(parse_watch_line, case["lines"]) if t is not None]
        out.append((case["session_id"], options, flags.get("source", "default"), turns))
    return out


def stage_costs(sessions: list[Session], brain: BrainIndex) -> dict[str, float]:
    """Per-turn cost (µs) of each stage on the windows the replay actually sees (steady state)."""
    texts: list[str] = []
    windows: list[list[tuple[str, list[Any]]]] = []
    for _, options, _, session_turns in sessions:
        window: list[tuple[str, list[Any]]] = []
        for role, text in session_turns:
            texts.append(text)
            window = [*window, (role, extract_candidates(text))][-options.effective_window_turns :]
            windows.append(window)
    merged = [merge_window(w) for w in windows]
    pointers = [resolve(m, brain, ["default"]) for m in merged]
    n = len(texts)

    def per_turn(fn: Callable[[], Any]) -> float:
        return min(timed(fn) for _ in range(3)) / n * 1e6

    def each(items: Iterable[Any], fn: Callable[[Any], Any]) -> Callable[[], None]:
        def run() -> None:
            for item in items:
                fn(item)

        return run

    pairs = [(p, m) for p, m in zip(pointers, merged, strict=True) if p]
    return {
        "turns": n,
        "extract": per_turn(each(texts, extract_candidates)),
        "merge": per_turn(each(windows, merge_window)),
        "resolve": per_turn(each(merged, lambda m: resolve(m, brain, ["default"]))),
        "gate": per_turn(each(pairs, lambda pm: gate(pm[0], candidates_by_norm(pm[1]), window_size=4))),
        "turns_with_pointers": len(pairs),
    }


def report_stages(sessions: list[Session], brain: BrainIndex) -> None:
    """Print :func:`stage_costs`."""
    c = stage_costs(sessions, brain)
    n = int(c["turns"])
    print(f"  per stage, µs per turn (steady state, {n} turns):")
    print(f"    extract (one new turn)     : {c['extract']:6.2f}")
    print(f"    merge (rolling window)     : {c['merge']:6.2f}")
    print(f"    resolve (all arms)         : {c['resolve']:6.2f}")
    print(f"    gate (turns with pointers) : {c['gate']:6.2f}   ({int(c['turns_with_pointers'])} of {n} turns have pointers)")


def replay_rates(sessions: list[Session], brain: BrainIndex, repeats: int = 3) -> tuple[int, float, float]:
    """(turns, first-pass turns/s with every memo cache empty, steady-state turns/s)."""
    clear_text_caches(brain)
    start = time.perf_counter()
    turns = run_sessions(sessions, brain)
    cold = turns / (time.perf_counter() - start)
    warm = turns / min(timed(lambda: run_sessions(sessions, brain)) for _ in range(repeats))
    return turns, cold, warm


def synopsis_us(pages: list[Page]) -> float:
    sample = pages[: min(len(pages), 20_000)]
    return min(timed(each_page(sample)) for _ in range(3)) / len(sample) * 1e6


def measure(pages_n: int = 100_000, sessions_n: int = 2_000) -> dict[str, Any]:
    """The suite's figures: replay turns/s and stage costs on the conformance corpus and on a
    synthetic brain of ``pages_n`` pages (one process, this core)."""
    out: dict[str, Any] = {"load": os.getloadavg()[0]}
    brain = load_brain_dir(CONFORMANCE / "brain")
    gc.freeze()
    sessions = conformance_sessions()
    turns, cold, warm = replay_rates(sessions, brain)
    out["conformance"] = {"turns": turns, "cold_per_s": cold, "steady_per_s": warm,
                          "stages_us": stage_costs(sessions, brain), "pages": brain.live_page_count}
    pages, names = synthetic_brain(pages_n)
    fig, big = index_figures(pages)
    gc.freeze()
    syn = synthetic_sessions(names, sessions_n)
    turns, cold, warm = replay_rates(syn, big)
    out["synthetic"] = {"turns": turns, "cold_per_s": cold, "steady_per_s": warm, "pages": pages_n,
                        "stages_us": stage_costs(syn, big), "build_s": fig["cpu_s"], "index": fig,
                        "steady_per_cpu_s": steady_per_cpu_second(syn, big),
                        "synopsis_us_per_page": synopsis_us(pages)}
    return out


# ----------------------------------------------------------------------------- 100k-page brain

BRAIN_TARGETS = {"build_cpu_s": 0.5, "index_mib": 60.0, "turns_per_cpu_s": 35_000.0}
"""Issue 15's figures for a 100,000-page brain: index build CPU seconds, its memory, replay rate."""


def index_figures(pages: list[Page]) -> tuple[dict[str, float], BrainIndex]:
    """One index build as a worker does it at start-up (garbage collector on) and the index.

    ``cpu_s`` / ``wall_s``: that build's CPU (user + system of this process) and wall seconds;
    ``rss_mib``: resident memory it still holds after a collection (the pages were there before);
    ``traced_mib`` / ``traced_peak_mib``: a second build under ``tracemalloc``, Python heap kept and
    its peak during the build (allocator slack and arenas not included, unlike ``rss_mib``).
    """
    gc.collect()
    rss0 = rss_bytes()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    index = BrainIndex.build(pages)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    gc.collect()
    rss = rss_bytes() - rss0
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    again = BrainIndex.build(pages)
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del again
    gc.collect()
    return ({"cpu_s": cpu, "wall_s": wall, "rss_mib": rss / 2**20, "traced_mib": (kept - base) / 2**20,
             "traced_peak_mib": (peak - base) / 2**20, "live_pages": float(index.live_page_count),
             "alias_rows": float(index.alias_row_count)}, index)


def directory_figures(pages: list[Page]) -> dict[str, float]:
    """``load_brain_dir`` of the same pages written as a brain directory (pages.jsonl), in a fresh
    process so nothing freed earlier hides its memory: CPU seconds and resident memory of the whole
    brain (reading, parsing, checking, pages and index)."""
    with tempfile.TemporaryDirectory(prefix="brain-bench-") as tmp:
        path = Path(tmp) / "pages.jsonl"
        with open(path, "wb") as fh:
            for p in pages:
                fh.write(orjson.dumps({"id": p.id, "slug": p.slug, "title": p.title, "type": p.type,
                                       "compiled_truth": p.compiled_truth, "frontmatter": p.frontmatter,
                                       "deleted": p.deleted}) + b"\n")
        out = subprocess.run([sys.executable, "-c", _LOAD_DIR, tmp], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
        cpu, rss = (float(x) for x in out.split())
        return {"cpu_s": cpu, "rss_mib": rss / 2**20, "file_mib": path.stat().st_size / 2**20}


_LOAD_DIR = """
import gc, resource, sys, time
from pipeline.braindir import load_brain_dir
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()
gc.collect()
before, started = rss(), time.process_time()
brain = load_brain_dir(sys.argv[1])
cpu = time.process_time() - started
gc.collect()
print(cpu, rss() - before)
"""


def steady_per_cpu_second(sessions: list[Session], brain: BrainIndex, repeats: int = 3) -> float:
    """Replay turns per CPU-second (this process's user + system time), best of ``repeats`` warm passes."""
    run_sessions(sessions, brain)
    best = float("inf")
    turns = 0
    for _ in range(repeats):
        cpu0 = time.process_time()
        turns = run_sessions(sessions, brain)
        best = min(best, time.process_time() - cpu0)
    return turns / best


def brain_rows(index: dict[str, float], per_cpu_s: float, directory: dict[str, float] | None = None) -> list[tuple[str, str]]:
    """(what, figure) rows of the 100k-page brain, each as a ratio to its target (≤ 1 meets a
    ceiling, ≥ 1 meets a floor)."""
    t = BRAIN_TARGETS
    rows = [
        ("index build, CPU seconds (one build, collector on)",
         f"{index['cpu_s']:.2f} s = {index['cpu_s'] / t['build_cpu_s']:.2f}x target ≤ {t['build_cpu_s']} s "
         f"({index['wall_s']:.2f} s wall)"),
        ("index memory, resident after the build (Python heap kept / peak)",
         f"{index['rss_mib']:.0f} MiB = {index['rss_mib'] / t['index_mib']:.2f}x target ≤ {t['index_mib']:.0f} MiB "
         f"({index['traced_mib']:.0f} / {index['traced_peak_mib']:.0f} MiB)"),
        ("replay through step, steady, turns per CPU-second",
         f"{per_cpu_s:,.0f} = {per_cpu_s / t['turns_per_cpu_s']:.2f}x target ≥ {t['turns_per_cpu_s']:,.0f}"),
    ]
    if directory is not None:
        rows.append((f"whole brain from a directory ({directory['file_mib']:.0f} MiB pages.jsonl): load_brain_dir",
                     f"{directory['cpu_s']:.2f} s CPU, +{directory['rss_mib']:.0f} MiB resident (pages and index)"))
    return rows


def report_synopsis(pages: list[Page]) -> None:
    print(f"  synopsis: {synopsis_us(pages):6.2f} µs per page (computed once per page, then cached)")


def each_page(pages: list[Page]) -> Callable[[], None]:
    def run() -> None:
        for page in pages:
            safe_synopsis(page.compiled_truth, page.frontmatter)

    return run


def op_runner(brain: BrainIndex) -> Callable[[], int]:
    """One pass of ``volunteer_context`` over the conformance op windows; returns its window turns."""
    cases = [json.loads(line) for line in (CONFORMANCE / "cases-op.jsonl").read_text(encoding="utf-8").splitlines()]
    cases = [c for c in cases if isinstance(c["window"], str) and c["window"].strip()]

    def run() -> int:
        turns = 0
        for c in cases:
            o = c["opts"]
            r = volunteer_context(
                c["window"], brain, source_ids=o.get("source_ids", ["default"]), prior_context=o.get("prior_context"),
                max_pages=o.get("max_pages"), min_confidence=o.get("min_confidence"), lexical_arms=o.get("lexical_arms", True),
            )
            turns += r["window_turns"]
        return turns

    return run


def op_rates(brain: BrainIndex) -> tuple[int, int, float, float]:
    """``volunteer_context`` over the conformance op windows: (calls, window turns, cold s, steady s)."""
    cases = [line for line in (CONFORMANCE / "cases-op.jsonl").read_text(encoding="utf-8").splitlines()
             if isinstance((window := json.loads(line)["window"]), str) and window.strip()]
    run = op_runner(brain)
    clear_text_caches(brain)
    turns = run()
    clear_text_caches(brain)
    cold_s = timed(run)
    warm_s = min(timed(run) for _ in range(3))
    return len(cases), turns, cold_s, warm_s


def report_op(brain: BrainIndex) -> None:
    calls, turns, cold_s, warm_s = op_rates(brain)
    print(f"  op mode ({calls} windows, {turns} turns in all):")
    print(f"    first pass   : {calls / cold_s:9,.0f} calls/s  {turns / cold_s:9,.0f} window turns/s")
    print(f"    steady state : {calls / warm_s:9,.0f} calls/s  {turns / warm_s:9,.0f} window turns/s")


# ----------------------------------------------------------------------------- synthetic brain

FIRST = ["Alice", "Bruno", "Chiara", "Dmitri", "Elena", "Farid", "Greta", "Hiro", "Ines", "Jonas", "Keiko", "Lars", "Mira", "Nadia", "Omar", "Priya", "Quentin", "Rosa", "Samir", "Tove", "Ugo", "Vera", "Wen", "Ximena", "Yusuf", "Zofia", "Amara", "Bjorn", "Cyrus", "Dalia", "Emeka", "Freya", "Goran", "Hana", "Ivo", "Jana", "Kofi", "Leila", "Mateo", "Noor", "Otto", "Pia", "Ravi", "Sana", "Tariq", "Uma", "Viktor", "Wanda", "Yara", "Zane"]
SYLLABLES = [
    "ber", "cal", "dor", "fen", "gal", "har", "ist", "jor", "kel", "lan", "mor", "nov", "par", "quin", "ros", "sel",
    "tor", "ul", "ven", "wick", "yar", "zen", "bra", "cor", "dun", "ell", "far", "gri", "hol", "ix", "kan", "lor",
    "mal", "nor", "ost", "pen", "rud", "sta", "tam", "vor", "wal", "zor",
]
WORDS = ["the", "roadmap", "looks", "solid", "but", "we", "should", "check", "the", "numbers", "before", "friday", "and", "also", "ask", "about", "hiring", "pricing", "churn", "pipeline", "revenue", "customers", "onboarding", "contract", "renewal", "design", "review", "launch", "budget"]


def surname(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.choice((2, 3, 3, 3)))).capitalize()


def synthetic_brain(n: int, seed: int = 7) -> tuple[list[Page], list[str]]:
    """``n`` pages: half people (shared surnames, some with aliases), companies, projects, concepts."""
    rng = random.Random(seed)
    pages: list[Page] = []
    names: list[str] = []
    used: set[str] = set()
    surnames = [surname(rng) for _ in range(max(50, n // 6))]
    for i in range(1, n + 1):
        kind = rng.random()
        if kind < 0.5:
            title, ptype, prefix = f"{rng.choice(FIRST)} {rng.choice(surnames)}", "person", "people"
        elif kind < 0.75:
            title, ptype, prefix = f"{surname(rng)} {rng.choice(['Labs', 'Robotics', 'Health', 'Capital', 'Systems'])}", "company", "companies"
        elif kind < 0.9:
            title, ptype, prefix = f"Project {surname(rng)}", "project", "projects"
        else:
            title, ptype, prefix = f"{surname(rng)} {rng.choice(['Method', 'Index', 'Loop'])}", "concept", "concepts"
        slug = f"{prefix}/{title.lower().replace(' ', '-')}"
        while slug in used:
            slug += "-2"
        used.add(slug)
        frontmatter: dict[str, Any] = {}
        if rng.random() < 0.3:
            short = title.split()[0] if ptype == "company" else title.split()[-1]
            frontmatter["aliases"] = [short if ptype != "person" else title.split()[0] + rng.choice(SYLLABLES)]
        if rng.random() < 0.2:
            frontmatter["summary"] = f"{title} in one line."
        body = f"---\nsource: import\n---\n# {title}\n\n{title} works on {rng.choice(WORDS)}. More detail follows here.\n"
        if rng.random() < 0.2:
            body = "<!--- gbrain:takes:begin -->\n| 1 | hunch | take | 0.5 | private |\n<!--- gbrain:takes:end -->\n" + body
        pages.append(Page(i, slug, title, type=ptype, compiled_truth=body, frontmatter=frontmatter, deleted=rng.random() < 0.01))
        names.append(title)
    return pages, names


def synthetic_sessions(names: list[str], count: int, seed: int = 11) -> list[Session]:
    rng = random.Random(seed)
    options = DecisionOptions()
    sessions: list[Session] = []
    for s in range(count):
        turns = []
        for t in range(rng.randint(4, 12)):
            name = rng.choice(names)
            form = rng.random()
            mention = name if form < 0.5 else (name.split()[-1] if form < 0.7 else (f"{name}'s" if form < 0.85 else name.lower()))
            filler = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
            text = f"{filler} {mention} {' '.join(rng.choice(WORDS) for _ in range(rng.randint(0, 8)))}".strip()
            turns.append(("user" if t % 2 == 0 else "assistant", text))
        sessions.append((f"syn-{s:05d}", options, "default", turns))
    return sessions


def counted_pass(what: str, pages_n: int, sessions_n: int) -> int:
    """Set up, warm up, then run one pass inside ``operator.call``, so that
    ``valgrind --tool=callgrind --toggle-collect=_operator_call`` counts the instructions of that pass
    alone (the set-up runs uncounted). ``what``: ``replay`` (the synthetic brain, steady: two passes
    before), ``op-warm`` (the op windows, twice before) or ``op-cold`` (the same after
    :func:`clear_text_caches`). Returns the turns of the pass."""
    import operator

    if what == "replay":
        pages, names = synthetic_brain(pages_n)
        big = BrainIndex.build(pages)
        gc.freeze()
        sessions = synthetic_sessions(names, sessions_n)
        run_sessions(sessions, big)
        run_sessions(sessions, big)
        return int(operator.call(run_sessions, sessions, big))
    brain = load_brain_dir(CONFORMANCE / "brain")
    gc.freeze()
    run = op_runner(brain)
    run()
    run()
    if what == "op-cold":
        clear_text_caches(brain)
    return int(operator.call(run))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=100_000, help="synthetic brain size (default 100000)")
    parser.add_argument("--sessions", type=int, default=2_000, help="synthetic sessions (default 2000)")
    parser.add_argument("--counted-pass", choices=("replay", "op-warm", "op-cold"),
                        help="only set up and run one pass for valgrind's instruction count (see counted_pass)")
    args = parser.parse_args()
    if args.counted_pass:
        print(f"{counted_pass(args.counted_pass, args.pages, args.sessions)} turns in the counted pass")
        return
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"Python {sys.version.split()[0]} on one core; best of 3 unless marked first pass; "
          f"load average {load:.2f} on {os.cpu_count()} CPUs (other load makes these figures lower)")

    print("\nConformance corpus (3,121-page brain)")
    t0 = time.perf_counter()
    brain = load_brain_dir(CONFORMANCE / "brain")
    print(f"  brain load + index: {(time.perf_counter() - t0) * 1000:.0f} ms")
    gc.freeze()
    sessions = conformance_sessions()
    report_replay("watch sessions", sessions, brain)
    report_op(brain)
    report_stages(sessions, brain)

    print(f"\nSynthetic brain ({args.pages:,} pages)")
    pages, names = synthetic_brain(args.pages)
    fig, big = index_figures(pages)
    directory = directory_figures(pages)
    print(f"  index: {big.live_page_count:,} live pages, {big.alias_row_count:,} alias rows; {os.getloadavg()[0]:.2f} load")
    gc.freeze()
    syn = synthetic_sessions(names, args.sessions)
    for what, figure in brain_rows(fig, steady_per_cpu_second(syn, big), directory):
        print(f"  {what:<72} {figure}")
    report_replay("generated sessions", syn, big)
    report_stages(syn, big)
    report_synopsis(pages)


if __name__ == "__main__":
    main()
