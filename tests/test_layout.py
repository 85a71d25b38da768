"""The package layout keeps its promises: no import circles between modules, imports point
one way between layers (STYLE.md, conventions 1 and 3) — the compiled core ``lexguide._core``
counted as a module of its own, whose imports are the Python modules its sources import
(``nb::module_::import_("lexguide...")``), and the C++ sources' includes checked the same way
— and docs and sources cite only files the repository holds, without work diaries (STYLE.md,
convention 15).

Every ``import`` statement counts, including those inside functions and under
``TYPE_CHECKING``: a lazy import is still a dependency."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import lexguide
import lexguide._core

SRC = Path(lexguide.__file__).parent

#: Layer -> the layers it may import (besides itself and the leaf modules below).
ALLOWED = {
    "_core": set(),
    "regex": {"_core"},
    "gguf": set(),
    "tokenizer": {"gguf"},
    "grammar": {"regex", "_core"},
    "jsonschema": {"grammar", "regex"},
    "engine": {"grammar", "jsonschema", "regex", "tokenizer", "gguf", "_core"},
    "runtime": {"engine", "grammar", "jsonschema", "regex", "tokenizer", "gguf", "_core"},
    "server": {"runtime", "engine", "grammar", "jsonschema", "tokenizer", "gguf"},
    "integrations": {"engine", "grammar", "jsonschema", "tokenizer", "gguf", "runtime"},
}
#: Modules every layer may import: they import nothing of ours but each other.
LEAVES = {"errors", "limits", "model_files", "__init__"}


#: The compiled core: a module whose imports are read from its C++ sources (below).
CORE = "lexguide._core"
CSRC = Path(__file__).resolve().parent.parent / "csrc"
#: A Python module the C++ sources import at run time (errors they raise, callbacks).
CORE_IMPORT = re.compile(r'import_\(\s*"(lexguide(?:\.\w+)*)"\s*\)')


def core_imports(csrc: Path) -> set[str]:
    """The modules of ours that the compiled core's sources under ``csrc`` import."""
    found: set[str] = set()
    for f in sorted(csrc.rglob("*")):
        if f.suffix in (".h", ".cc") and f.parent.name != "tools":
            found.update(CORE_IMPORT.findall(f.read_text(encoding="utf-8")))
    return found


def _modules() -> dict[str, Path]:
    out = {CORE: Path(lexguide._core.__file__)}
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
    return {name: core_imports(CSRC) if name == CORE else _imports(path, name, modules)
            for name, path in modules.items()}


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


def layer_problems(graph: dict[str, set[str]]) -> list[str]:
    """``module -> target`` for every import of ``graph`` against the layering."""
    bad = []
    for module, targets in graph.items():
        layer = _layer(module)
        if layer in LEAVES or layer not in ALLOWED:
            continue
        for target in targets:
            other = _layer(target)
            if other == layer or other in LEAVES or other in ALLOWED[layer]:
                continue
            bad.append(f"{module} -> {target}")
    return sorted(bad)


def test_layers_point_one_way():
    bad = layer_problems(_graph())
    assert bad == [], "imports against the layering:\n" + "\n".join(bad)


def test_nothing_imports_the_top():
    # the command line is the one entry point above the server (``lexguide serve``)
    for module, targets in _graph().items():
        for target in targets:
            top = _layer(target)
            if top == "server" and _layer(module) == "cli":
                continue
            if top in ("cli", "server", "integrations") and _layer(module) != top:
                raise AssertionError(f"{module} imports {target}")


def test_the_compiled_core_is_seen_among_the_imports():
    graph = _graph()
    users = {_layer(m) for m, targets in graph.items() if CORE in targets}
    # the core is imported by the layers that drive it, and by no other
    assert users and users <= {layer for layer, allowed in ALLOWED.items() if "_core" in allowed}
    assert {"regex", "engine", "runtime"} <= users


def test_the_compiled_core_imports_are_seen(tmp_path):
    graph = _graph()
    modules = _modules()
    # the binding raises lexguide.errors' classes; whatever it imports is one of our modules
    assert "lexguide.errors" in graph[CORE]
    assert graph[CORE] <= set(modules), graph[CORE] - set(modules)
    # a core reaching up into a layer that drives it is caught
    (tmp_path / "bind_engine.cc").write_text(
        'auto m = nb::module_::import_("lexguide.engine.matcher").attr("Matcher");\n')
    up = dict(graph, **{CORE: core_imports(tmp_path)})
    assert up[CORE] == {"lexguide.engine.matcher"}
    assert layer_problems(up) == ["lexguide._core -> lexguide.engine.matcher"]


# -- the C++ core: one folder per concept, includes pointing one way -------------------------
#: Folder (or binding file) -> the folders its includes may reach besides its own.
CORE_ALLOWED = {
    "common": set(),
    "engine": {"common"},
    "kernels": {"common"},
    "bind_engine.cc": {"engine", "common"},
    "bind_kernels.cc": {"kernels", "common"},
    "bind_matcher.cc": {"engine", "common"},
    "bind.cc": set(),
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def core_include_problems(csrc: Path) -> list[str]:
    """``file -> include`` for every include of the C++ sources under ``csrc`` that reaches
    a folder its own may not (or a file that does not exist)."""
    bad = []
    for f in sorted(csrc.rglob("*")):
        if f.suffix not in (".h", ".cc") or f.parent.name == "tools":
            continue
        rel = f.relative_to(csrc)
        owner = rel.parts[0] if len(rel.parts) > 1 else rel.name
        allowed = CORE_ALLOWED.get(owner)
        for inc in INCLUDE.findall(f.read_text(encoding="utf-8")):
            target = inc.split("/")[0] if "/" in inc else None
            if allowed is None or target is None or not (csrc / inc).is_file() or (
                    target != owner and target not in allowed):
                bad.append(f"{rel} -> {inc}")
    return bad


def test_core_sources_point_one_way(tmp_path):
    assert core_include_problems(CSRC) == []
    # the check itself sees a kernel header reaching into the engine
    (tmp_path / "engine").mkdir()
    (tmp_path / "kernels").mkdir()
    (tmp_path / "engine" / "mask.h").write_text("#pragma once\n")
    (tmp_path / "kernels" / "dot.h").write_text('#pragma once\n#include "engine/mask.h"\n')
    assert core_include_problems(tmp_path) == ["kernels/dot.h -> engine/mask.h"]


def test_the_checks_see_a_circle(tmp_path):
    # the circle detector itself: a tiny graph with a known circle
    modules = {"lexguide.a": tmp_path / "a.py", "lexguide.b": tmp_path / "b.py"}
    modules["lexguide.a"].write_text("def f():\n    from lexguide import b\n")
    modules["lexguide.b"].write_text("import lexguide.a\n")
    assert _imports(modules["lexguide.a"], "lexguide.a", modules) == {"lexguide.b"}
    assert _imports(modules["lexguide.b"], "lexguide.b", modules) == {"lexguide.a"}


# -- docs and sources cite what the repository holds ------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
#: Where citations are looked for: the docs, the sources, the tests' code, the benches, the build.
CITING = ("*.md", "docs/*.md", "csrc/**/*.h", "csrc/**/*.cc", "csrc/**/*.md", "csrc/**/*.sh",
          "src/lexguide/**/*.py", "tests/**/*.py", "bench/*.py", "CMakeLists.txt", "pyproject.toml")
#: A repository path: one of these folders, then path characters (globs and {a,b} included);
#: not inside a URL or another path (nothing path-like right before it).
CITED = re.compile(r"(?<![\w./-])((?:docs|spec|csrc|src/lexguide|tests|bench|\.ci)/[\w./*{},-]*)")
#: Work diaries: the word "session" and a number (history belongs in git).
DIARY = re.compile(r"\bsession \d+", re.IGNORECASE)


#: Cited by committed code before the file landed: each entry names who owes it. Keep short.
PENDING: set[str] = set()


def _citing_files(root: Path) -> list[Path]:
    files = {p for pattern in CITING for p in root.glob(pattern) if p.is_file()}
    # test data is not prose, and this file cites bad paths on purpose (the last test below)
    return sorted(p for p in files if "data" not in p.relative_to(root).parts[:2]
                  and p.relative_to(root).as_posix() != "tests/test_layout.py")


def _expand(path: str) -> list[str]:
    """``a/{b,c}.h`` -> ``a/b.h``, ``a/c.h`` (one level of braces, as the docs write them)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    if "," not in m.group(1):  # a format placeholder (``bench/{name}.py``), not a citation
        return []
    return [path[:m.start()] + alt + path[m.end():] for alt in m.group(1).split(",")]


def _exists(root: Path, path: str) -> bool:
    if path == "bench/results":
        return True  # made by the first bench run
    if path.startswith("bench/results/"):
        # results files appear when their bench runs; each is named after the bench writing it
        stem = path.removeprefix("bench/results/").split(".")[0]
        return any(stem == b.stem or stem.startswith(b.stem + "_") for b in root.glob("bench/*.py"))
    if "*" in path:
        return any(root.glob(path))
    return (root / path).exists()


def missing_citations(root: Path) -> list[str]:
    """``file:line: path`` for every cited repository path that does not exist under ``root``."""
    bad = []
    for f in _citing_files(root):
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in CITED.finditer(line):
                cited = m.group(1).rstrip(".,")
                if "{" in cited and "}" not in cited:
                    cited = cited[:cited.index("{")]
                for path in _expand(cited):
                    if path not in PENDING and not _exists(root, path.rstrip("/")):
                        bad.append(f"{f.relative_to(root)}:{n}: {path}")
    return bad


def diaries(root: Path) -> list[str]:
    """``file:line`` of every "session N" in the docs and sources under ``root``."""
    bad = []
    for f in _citing_files(root):
        lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        bad += [f"{f.relative_to(root)}:{n}: {line.strip()[:80]}"
                for n, line in enumerate(lines, 1) if DIARY.search(line)]
    return bad


def test_cited_paths_exist():
    # STYLE.md: a doc never cites a file that is not in the repository (nor does a comment)
    bad = missing_citations(ROOT)
    assert bad == [], "cited paths that are not in the repository:\n" + "\n".join(bad)


def test_no_session_diaries():
    # history lives in git; docs and comments describe the design as it is
    bad = diaries(ROOT)
    assert bad == [], "work diaries in docs or sources:\n" + "\n".join(bad)


def test_the_citation_checks_see_a_bad_citation(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "mask.py").write_text("")
    diary = "Session" + " 7 measured it."  # (not spelled out: this file is checked too)
    (tmp_path / "docs" / "a.md").write_text(
        "See `docs/a.md`, `spec/lark.md` §1, `bench/results/mask_budget.md`,\n"
        "`bench/results/nothing.md`, https://example.org/docs/b.md and `docs/{a,c}.md`.\n"
        f"{diary}\n")
    assert missing_citations(tmp_path) == ["docs/a.md:1: spec/lark.md",
                                           "docs/a.md:2: bench/results/nothing.md",
                                           "docs/a.md:2: docs/c.md"]
    assert diaries(tmp_path) == [f"docs/a.md:3: {diary}"]
