"""The shape of the code: the shell on top, libraries without import circles.

The import graph is read statically (every `import`, at module level or inside a function), so an
import that only runs on some path still counts. A fresh interpreter then imports every library
module and checks that none of them pulled the command line in.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("builder", "annotation", "evaluate")
SHELL = "builder.cli"


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def is_shell(name: str) -> bool:
    return name == SHELL or name.startswith(SHELL + ".")


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports; `from pkg import sub` counts as importing `pkg.sub`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_circle():
    assert cycles(graph()) == []


def test_the_cycle_finder_sees_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_library_module_imports_the_shell():
    offenders = {m: sorted(filter(is_shell, deps)) for m, deps in graph().items() if not is_shell(m)}
    assert {m: d for m, d in offenders.items() if d} == {}


def test_every_library_module_imports_in_a_fresh_interpreter_without_the_shell():
    library = sorted(m for m in modules() if not is_shell(m))
    script = (
        "import importlib, json, sys\n"
        f"pulled = {{}}\nfor m in {library!r}:\n"
        "    importlib.import_module(m)\n"
        f"    shell = sorted(k for k in sys.modules if k == {SHELL!r} or k.startswith({SHELL + '.'!r}))\n"
        "    if shell:\n        pulled[m] = shell\n        break\n"
        "print(json.dumps(pulled))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


def test_every_package_declares_its_public_names_and_each_exists():
    """`__all__` in every package's `__init__`; each name is defined there or is a submodule of the package."""
    missing, unknown = [], {}
    for name, path in modules().items():
        if path.name != "__init__.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = [node.value for node in tree.body if isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)]
        if not declared:
            missing.append(name)
            continue
        defined = {t.id for node in ast.walk(tree) for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
        defined |= {a.asname or a.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for a in node.names}
        defined |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        submodules = {p.stem if p.suffix == ".py" else p.name for p in path.parent.iterdir()
                      if p.suffix == ".py" or (p / "__init__.py").is_file()}
        names = ast.literal_eval(declared[0])
        unknown[name] = sorted(set(names) - defined - submodules)
    assert missing == [] and {k: v for k, v in unknown.items() if v} == {}


def test_the_shell_holds_no_sql():
    g = graph()
    mods = modules()
    for name in filter(is_shell, g):
        text = mods[name].read_text(encoding="utf-8")
        assert "sqlalchemy" not in text and "builder.workspace.schema" not in g[name], name


def table_writers() -> dict[str, set[str]]:
    """table -> the modules that insert into, update or delete from it (`t.<table>.insert()`, `upsert_…(…, t.<table>, …)`)."""
    writes: dict[str, set[str]] = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            table = None
            if (isinstance(node, ast.Attribute) and node.attr in ("insert", "update", "delete")
                    and isinstance(node.value, ast.Attribute) and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "t"):
                table = node.value.attr
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("upsert_ignore", "upsert_replace"):
                arg = node.args[1] if len(node.args) > 1 else None
                if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "t":
                    table = arg.attr
            if table:
                writes.setdefault(table, set()).add(name)
    return writes


def test_each_workspace_table_has_one_writer():
    writers = table_writers()
    assert {"proposals", "sentence_pairs", "lexicon_forms"} <= set(writers)  # the scan sees writes
    assert {table: sorted(mods) for table, mods in writers.items() if len(mods) > 1} == {}


# Run inside a tool environment of its own (`builder.testing.parity`), importing what the project does not depend on.
TOOL_SCRIPTS = ("builder.testing.reference_scorers",)


def test_the_libraries_import_exactly_the_dependencies_they_declare():
    """Every third-party package the library imports is a declared dependency (not one that only arrives with
    another), and every declared dependency is imported."""
    from importlib.metadata import packages_distributions

    import pytest
    from packaging.requirements import Requirement

    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

    def canonical(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {canonical(Requirement(r).name) for r in project["dependencies"]}
    optional = {canonical(Requirement(r).name) for extra in project["optional-dependencies"].values() for r in extra}
    distributions = packages_distributions()
    imported: dict[str, set[str]] = {}
    for name, path in modules().items():
        if name in TOOL_SCRIPTS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            tops = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
            for top in {t.split(".")[0] for t in tops} - set(PACKAGES) - sys.stdlib_module_names:
                for dist in distributions.get(top, [top]):
                    imported.setdefault(canonical(dist), set()).add(name)
    undeclared = {d: sorted(m) for d, m in imported.items() if d not in declared | optional}
    assert undeclared == {} and sorted(declared - set(imported)) == []
