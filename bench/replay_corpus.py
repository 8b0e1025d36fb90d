"""The whole-process replay corpus: the conformance watch sessions repeated under new session ids.

Issue 15's shape: every one of the 450 conformance watch sessions, ``--repeats`` times, each copy
under its own session id (``<id>~<k>``), as Turn records (JSON lines) in file order, copy after
copy. With the 3,121-page conformance brain this is what ``volunteer replay FILE --json --brain
DIR`` is measured on (34 repeats: 15,300 sessions, ~132,000 turns).

``--unique`` gives every turn's text its own trailing number (`` 17``): digits are never a
candidate and never change one, so the decisions, and the ``--json`` output, are exactly those of
the plain corpus, but no text repeats and no memo keyed by text or window can help. This is the
figure without the repetition benefit (docs/performance.md).

    .venv/bin/python -m bench.replay_corpus OUT.jsonl [--repeats 34] [--unique]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "tests" / "fixtures" / "conformance"
BRAIN_DIR = CONFORMANCE / "brain"
DEFAULT_REPEATS = 34


def corpus_lines(repeats: int = DEFAULT_REPEATS, unique: bool = False) -> list[bytes]:
    """Turn records (one JSON object per line, no newline) of ``repeats`` renamed copies; with
    ``unique``, each text ends in its record's own number."""
    from pipeline.core.session import parse_watch_line

    cases = [json.loads(line) for line in (CONFORMANCE / "cases-watch.jsonl").read_text(encoding="utf-8").splitlines()]
    base: list[tuple[str, str | None, list[tuple[str, str]]]] = []
    for case in cases:
        turns = [t for t in map(parse_watch_line, case["lines"]) if t is not None]
        base.append((case["session_id"], case["flags"].get("source"), turns))
    out: list[bytes] = []
    for k in range(repeats):
        for sid, source, turns in base:
            for n, (role, text) in enumerate(turns, 1):
                if unique:
                    text = f"{text} {len(out)}"
                record: dict[str, object] = {"session_id": f"{sid}~{k}", "role": role, "text": text, "turn": n}
                if source is not None:
                    record["source_id"] = source
                out.append(orjson.dumps(record))
    return out


def write_corpus(path: Path, repeats: int = DEFAULT_REPEATS, unique: bool = False) -> int:
    """Write the corpus to ``path``; returns the number of Turn records."""
    lines = corpus_lines(repeats, unique)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="file to write (JSON lines)")
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS, help="copies of the 450 sessions (default 34)")
    parser.add_argument("--unique", action="store_true", help="every text its own trailing number: nothing repeats")
    args = parser.parse_args()
    n = write_corpus(args.out, args.repeats, args.unique)
    print(f"{n} Turn records in {450 * args.repeats} sessions -> {args.out}")


if __name__ == "__main__":
    main()
