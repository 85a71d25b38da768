"""The package layout keeps its promises: no import circles between modules, and imports point
one way between layers (STYLE.md, conventions 1 and 3).

Every ``import`` statement counts, including those inside functions and under
``TYPE_CHECKING``: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import lexguide

SRC = Path(lexguide.__file__).parent

#: Layer -> the layers it may import (besides itself and the leaf modules below).
ALLOWED = {
    "regex": {"_core"},
    "gguf": set(),
    "tokenizer": {"gguf"},
    "grammar": {"regex"},
    "jsonschema": {"grammar", "regex"},
    "engine": {"grammar", "jsonschema", "regex", "tokenizer", "gguf", "_core"},
    "runtime": {"engine", "grammar", "jsonschema", "regex", "tokenizer", "gguf", "_core"},
    "server": {"runtime", "engine", "grammar", "jsonschema", "tokenizer", "gguf"},
    "integrations": {"engine", "grammar", "jsonschema", "tokenizer", "gguf", "runtime"},
}
#: Modules every layer may import: they import nothing of ours but each other.
LEAVES = {"errors", "limits", "model_files", "__init__"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        parts = ["lexguide", *rel.parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Our modules that ``path`` (module ``name``) imports, resolved to module names."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import sub`` imports the submodule when there is one
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in modules and t != name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, name, modules) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_no_import_circles():
    graph = _graph()
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = 0
    for root in graph:
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
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    assert circles == [], f"import circles: {circles}"


def test_layers_point_one_way():
    bad = []
    for module, targets in _graph().items():
        layer = _layer(module)
        if layer in LEAVES or layer not in ALLOWED:
            continue
        for target in targets:
            other = _layer(target)
            if other == layer or other in LEAVES or other in ALLOWED[layer]:
                continue
            bad.append(f"{module} -> {target}")
    assert bad == [], "imports against the layering:\n" + "\n".join(sorted(bad))


def test_nothing_imports_the_top():
    # the command line is the one entry point above the server (``lexguide serve``)
    for module, targets in _graph().items():
        for target in targets:
            top = _layer(target)
            if top == "server" and _layer(module) == "cli":
                continue
            if top in ("cli", "server", "integrations") and _layer(module) != top:
                raise AssertionError(f"{module} imports {target}")


def test_the_checks_see_a_circle(tmp_path):
    # the circle detector itself: a tiny graph with a known circle
    modules = {"lexguide.a": tmp_path / "a.py", "lexguide.b": tmp_path / "b.py"}
    modules["lexguide.a"].write_text("def f():\n    from lexguide import b\n")
    modules["lexguide.b"].write_text("import lexguide.a\n")
    assert _imports(modules["lexguide.a"], "lexguide.a", modules) == {"lexguide.b"}
    assert _imports(modules["lexguide.b"], "lexguide.b", modules) == {"lexguide.a"}
