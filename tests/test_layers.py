"""The house's floors: the engine library at the bottom, tools and the web app above it, the command line on top.

Every first-party import, at module level or inside a function, is read from the source. An import may
only go down a floor (or stay within its own package): tools never import the app, the app never imports
the tools, and nothing imports the command line. No set of modules imports itself in a circle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = {"engine": 0, "tools": 1, "app": 1, "cli": 2}
# The model runtime's wing: it runs forwards and knows nothing of drafting, policies or acceptance; of the
# rest of the engine it reads only the errors it raises and the tree mask's bias.
RUNTIME = "engine.models"
RUNTIME_READS = {"engine.errors", "engine.tree"}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_party_imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every first-party module `path` imports, wherever in the file the import stands."""
    found = set()
    package = module_name(path, root).rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(name for name in names if name.split(".")[0] in FLOORS)
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = {module_name(path, root): path for package in FLOORS for path in (root / package).rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        # `from engine.policies import make_policy` names a module or a symbol: keep what is a module.
        graph[name] = {target for target in first_party_imports(path, root) if target in modules and target != name}
    return graph


def floor_violations(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in graph.items():
        floor, package = FLOORS[module.split(".")[0]], module.split(".")[0]
        for target in targets:
            target_package = target.split(".")[0]
            if target_package != package and FLOORS[target_package] >= floor:
                wrong.append(f"{module} -> {target}")
    return sorted(wrong)


def runtime_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports from the model runtime's wing into the engine's other rooms, beyond RUNTIME_READS."""
    return sorted(f"{module} -> {target}" for module, targets in graph.items() if module.startswith(RUNTIME)
                  for target in targets if not target.startswith(RUNTIME) and target not in RUNTIME_READS)


def test_no_import_runs_up_a_floor_or_across_between_tools_and_app():
    wrong = floor_violations(import_graph())
    assert not wrong, "imports that run up or across a floor:\n" + "\n".join(wrong)


def test_the_model_runtime_imports_nothing_of_the_decoding_algorithm():
    wrong = runtime_violations(import_graph())
    assert not wrong, "the model runtime reaching into the engine's algorithm:\n" + "\n".join(wrong)


def test_no_modules_import_each_other_in_a_circle():
    graph = import_graph()
    circles = [component for component in strongly_connected(graph) if len(component) > 1]
    assert not circles, f"import circles: {circles}"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the graph's strongly connected components.

    >>> sorted(map(sorted, strongly_connected({"a": {"b"}, "b": {"a"}, "c": {"a"}})))
    [['a', 'b'], ['c']]
    """
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return components


def test_the_checks_catch_an_upward_import_and_a_circle(tmp_path):
    """The floor and circle checks have teeth, on a made-up tree."""
    files = {"engine/__init__.py": "", "engine/a.py": "def f():\n    from tools.bench import run\n",
             "engine/b.py": "from engine.c import x\n", "engine/c.py": "from . import b\n",
             "tools/__init__.py": "", "tools/bench.py": "from engine.a import f\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text, encoding="utf-8")
    graph = import_graph(tmp_path)
    assert floor_violations(graph) == ["engine.a -> tools.bench"]
    circles = sorted(sorted(c) for c in strongly_connected(graph) if len(c) > 1)
    assert circles == [["engine.a", "tools.bench"], ["engine.b", "engine.c"]]


def test_importing_the_engine_library_pulls_in_neither_the_web_stack_nor_the_tools():
    modules = sorted(module_name(path) for path in (ROOT / "engine").rglob("*.py"))
    code = (f"import importlib, sys\nfor name in {modules!r}: importlib.import_module(name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('fastapi', 'starlette', 'uvicorn', 'app', 'tools', 'cli')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"
