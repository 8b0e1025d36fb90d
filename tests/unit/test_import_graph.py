"""The import graph of ``pipeline``, ``topics`` and ``sinks``: no cycle, and no arrow that runs back up.

Every module is parsed with :mod:`ast`, so an import inside a function or under
``if TYPE_CHECKING:`` counts like one at the top: a loop held together by late imports is still a
loop (docs/architecture.md, "Layers"). ``from a.b import c`` is an arrow to ``a.b.c`` when that is a
module, else to ``a.b``; relative imports are resolved against the importing module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pipeline", "topics", "sinks")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):  # every import, at any depth (functions, TYPE_CHECKING blocks)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                yield full if full in known else target


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        for target in _imports(name, path, known):
            # ``import a.b.c`` also names a.b.c's module; keep the longest known prefix
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One concrete loop inside ``component``, for the failure message."""
    members = set(component)
    start = component[0]
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for child in sorted(graph[node] & members):
            if child == start:
                return [*seen[node], start]
            if child not in seen:
                seen[child] = [*seen[node], child]
                frontier.append(child)
    return component


def _in(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


FORBIDDEN: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    # (what it is, importers, imported) - the arrows docs/architecture.md says must never exist
    ("topics must not import sinks, agents or cli", ("topics",), ("sinks", "pipeline.agents", "pipeline.cli")),
    ("sinks must not import agents", ("sinks",), ("pipeline.agents",)),
    ("agents must not import cli", ("pipeline.agents",), ("pipeline.cli",)),
]

EMBEDDED_USERS = ("pipeline.cli", "pipeline.app", "pipeline.worker", "pipeline.embedded")
"""Who may import :mod:`pipeline.embedded` (the broker and database starters); tests may too."""

COMPAT_USERS = ("pipeline.app", "pipeline.worker", "pipeline.embedded", "pipeline.compat")
"""Who may import :mod:`pipeline.compat` (every patch of third-party internals): the app's start-up
installs it, embedded may use it; nothing else may depend on a patch directly."""

RESTRICTED: list[tuple[str, str, tuple[str, ...]]] = [
    # (what it is, the restricted package, the only modules that may import it)
    ("embedded is for cli, the start-up and tests", "pipeline.embedded", EMBEDDED_USERS),
    ("compat is for the start-up and embedded", "pipeline.compat", COMPAT_USERS),
]


def _violations(graph: dict[str, set[str]]) -> list[str]:
    bad = []
    for rule, importers, imported in FORBIDDEN:
        bad += [f"{rule}: {src} -> {dst}" for src, targets in graph.items() if _in(src, *importers)
                for dst in sorted(targets) if _in(dst, *imported)]
    for rule, package, users in RESTRICTED:
        bad += [f"{rule}: {src} -> {dst}" for src, targets in graph.items() if not _in(src, *users)
                for dst in sorted(targets) if _in(dst, package)]
    return sorted(bad)


def test_the_package_has_no_import_cycle() -> None:
    graph = _graph()
    cycles = [f"{' -> '.join(_cycle_path(graph, component))}  (in the loop: {', '.join(component)})"
              for component in _cycles(graph)]
    assert not cycles, "import cycles (imports inside functions and TYPE_CHECKING count):\n" + "\n".join(cycles)


def _part(module: str) -> str:
    """The part a module belongs to: a sub-package of ``pipeline`` (``pipeline.hook``), ``topics``,
    ``sinks``, or a top-level module of ``pipeline`` on its own (``pipeline.settings``)."""
    parts = module.split(".")
    if parts[0] != "pipeline":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _parts_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    parts: dict[str, set[str]] = {}
    for src, targets in graph.items():
        arrows = parts.setdefault(_part(src), set())
        arrows.update(_part(dst) for dst in targets if _part(dst) != _part(src))
    return parts


def test_the_parts_import_each_other_one_way() -> None:
    """No loop between parts either (hook -> topics -> hook was one: each module was fine, but the
    two packages leaned on each other), so the parts can be drawn as layers."""
    parts = _parts_graph(_graph())
    cycles = [" -> ".join(_cycle_path(parts, component)) for component in _cycles(parts)]
    assert not cycles, "\n".join(cycles)
    assert _cycles(_parts_graph({"pipeline.hook.a": {"topics.d"}, "topics.d": {"pipeline.hook.b"}})) != []


def test_the_core_imports_nothing_outside_the_core() -> None:
    graph = _graph()
    bad = sorted((src, dst) for src, targets in graph.items() if _in(src, "pipeline.core")
                 for dst in targets if not _in(dst, "pipeline.core"))
    assert not bad, f"the core must stay pure: {bad}"


def test_no_arrow_runs_back_up() -> None:
    bad = _violations(_graph())
    assert not bad, "\n".join(bad)


def test_the_checker_reports_each_kind_of_forbidden_arrow() -> None:
    graph = {
        "topics.clients": {"pipeline.embedded.tansu", "pipeline.compat.fastdrain"},
        "pipeline.agents.sink": {"pipeline.compat"},
        "pipeline.app": {"pipeline.compat", "pipeline.embedded.tansu"},
        "pipeline.embedded.tansu": {"pipeline.compat.versions"},
        "pipeline.cli.up": {"pipeline.embedded.tansu", "pipeline.compat"},
        "sinks.db": {"pipeline.agents.context"},
    }
    assert _violations(graph) == [
        "compat is for the start-up and embedded: pipeline.agents.sink -> pipeline.compat",
        "compat is for the start-up and embedded: pipeline.cli.up -> pipeline.compat",
        "compat is for the start-up and embedded: topics.clients -> pipeline.compat.fastdrain",
        "embedded is for cli, the start-up and tests: topics.clients -> pipeline.embedded.tansu",
        "sinks must not import agents: sinks.db -> pipeline.agents.context",
    ]


def test_the_checker_sees_late_and_type_checking_imports(tmp_path: Path) -> None:
    """The parser counts what the loop of issue 14 was made of: function-level and TYPE_CHECKING imports."""
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pipeline.app import StreamApp\n"
              "def f():\n    from . import wiring\n    from .session_table import SESSION\n")
    path = tmp_path / "mod.py"
    path.write_text(source)
    known = {"pipeline.app", "pipeline.agents.wiring", "pipeline.agents.session_table", "pipeline.agents"}
    found = set(_imports("pipeline.agents.mod", path, known))
    assert {"pipeline.app", "pipeline.agents.wiring", "pipeline.agents.session_table"} <= found
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycle_path({"a": {"b"}, "b": {"a"}}, ["a", "b"]) == ["a", "b", "a"]
