"""The house's walls, read from the code's own imports: dependencies flow app → engine → (privacy,
storage), no import cycle, and no module reaches into another's private names; and the facade's
workspace reads the catalog once per table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WINGS = ("app", "engine", "privacy", "storage")
ALLOWED = {
    "app": {"app", "engine", "privacy", "storage"},
    "engine": {"engine", "privacy", "storage"},
    "privacy": {"privacy"},
    "storage": {"storage"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for wing in WINGS:
        for path in (REPO / wing).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imports(path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None, int]]:
    """(module imported, name imported from it or None, line) for every import, at any depth."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] in WINGS]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in WINGS:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((sub, None, node.lineno) if sub in modules else (node.module, a.name, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for target, _, _ in _imports(path, modules):
            while target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name and not name.startswith(target + "."):
                graph[name].add(target)
    return graph


def test_dependencies_flow_app_engine_privacy_storage() -> None:
    wrong = [
        (m, t) for m, targets in _graph().items() for t in targets if t.split(".")[0] not in ALLOWED[m.split(".")[0]]
    ]
    assert wrong == []


def test_no_import_cycle() -> None:
    graph, index, low, stack, on_stack, cycles = _graph(), {}, {}, [], set(), []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_module_imports_another_modules_private_names() -> None:
    modules = _modules()
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        aliases = {}
        for target, imported, line in _imports(path, modules):
            if imported is not None and imported.startswith("_") and target != name:
                found.append(f"{name}:{line} imports {target}.{imported}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in WINGS:
                aliases |= {
                    a.asname or a.name: f"{node.module}.{a.name}"
                    for a in node.names
                    if f"{node.module}.{a.name}" in modules
                }
            elif isinstance(node, ast.Import):
                aliases |= {a.asname: a.name for a in node.names if a.asname and a.name in modules}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and aliases[node.value.id] != name
            ):
                found.append(f"{name}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    assert found == []


def test_the_catalog_is_read_once_per_table_not_once_per_query(
    tmp_path: Path, sales_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`engine.workspace.Workspace` reads a table's record once and serves every later query from
    memory: the first query of a restarted service reads the catalog once, the next ones not at all."""
    from engine.service import Prima
    from storage import catalog
    from storage.schema import TableSpec
    from tests.conftest import sales_spec

    prima = Prima(tmp_path / "data", seed=1)
    prima.register(TableSpec.model_validate(sales_spec(sales_csv)))
    prima.build("sales")
    prima.close()
    reads: list[str] = []
    real = catalog.get
    monkeypatch.setattr(catalog, "get", lambda db, name: reads.append(name) or real(db, name))
    prima = Prima(tmp_path / "data", seed=1)
    counts = []
    for sql in ("SELECT COUNT(*) FROM sales WHERE age > 30", "SELECT region, AVG(amount) FROM sales GROUP BY region"):
        reads.clear()
        prima.query(sql)
        counts.append(len(reads))
    prima.close()
    assert counts == [1, 0]
