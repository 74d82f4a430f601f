"""Prints the import graph of engine/, tools/, app/ and cli/ by floor, from the same reading tests/test_layers.py checks.

    python scripts/import_graph.py          # which package imports which, and how many module imports each edge has
    python scripts/import_graph.py --dot    # every module import as Graphviz DOT (dot -Tsvg > graph.svg)
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from test_layers import FLOORS, floor_violations, import_graph, runtime_violations, strongly_connected  # noqa: E402


def package_of(module: str) -> str:
    """engine.policies.talon -> engine.policies; engine.policies (its __init__) -> engine.policies;
    engine.engine -> engine."""
    parts = module.split(".")
    if len(parts) == 2 and (ROOT.joinpath(*parts) / "__init__.py").exists():
        return module
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dot", action="store_true")
    graph = import_graph()
    if parser.parse_args().dot:
        print("digraph imports {\n  rankdir=BT;")
        for module, targets in sorted(graph.items()):
            for target in sorted(targets):
                print(f'  "{module}" -> "{target}";')
        print("}")
        return
    edges = Counter((package_of(m), package_of(t)) for m, targets in graph.items() for t in targets
                    if package_of(m) != package_of(t))
    for floor in sorted(set(FLOORS.values()), reverse=True):
        packages = sorted({package_of(m) for m in graph if FLOORS[m.split(".")[0]] == floor})
        print(f"floor {floor}: {', '.join(packages)}")
        for package in packages:
            below = [f"{target} ({count})" for (source, target), count in sorted(edges.items()) if source == package]
            if below:
                print(f"  {package} -> {', '.join(below)}")
    circles = [c for c in strongly_connected(graph) if len(c) > 1]
    print(f"\n{len(graph)} modules, {sum(map(len, graph.values()))} imports, "
          f"{len(circles)} circles, {len(floor_violations(graph))} imports up or across a floor, "
          f"{len(runtime_violations(graph))} from the model runtime into the algorithm")


if __name__ == "__main__":
    main()
