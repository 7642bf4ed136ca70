"""The package's shape, enforced: imports flow one way (cli -> bench/train -> engine/profile -> target/drafter ->
the pure core), never in a cycle, at the top of each file; the pure core imports no model code, no file I/O and no
plotting. An AST walk over caddtree/, so a cycle hidden in a function body is seen too."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "caddtree"
PURE_CORE = {"caddtree.tree", "caddtree.vocab", "caddtree.accept", "caddtree.budget", "caddtree.costmodel",
             "caddtree.errors"}
PURE_EXTERNAL = {"__future__", "bisect", "dataclasses", "heapq", "math", "typing", "numpy", "scipy", "cvxpy",
                 "torch"}  # what the pure core may import from outside the package (maths only)
OPTIONAL = {"llama_cpp", "matplotlib", "datasets", "cvxpy"}  # optional (a fallback or an optional output):
# imported where they are used, so start-up does not pay for them
ONLY_CLI_IMPORTS = ("caddtree.bench", "caddtree.train")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(imported module, whether at the top level of the file) for every import statement; a top-level try (an
    optional dependency with a fallback) counts as the top."""
    top = {id(node) for node in tree.body} | {id(n) for t in tree.body if isinstance(t, ast.Try) for n in ast.walk(t)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "caddtree" else [node.module]
            out += [(n, id(node) in top) for n in names]
    return out


MODULES = {module_name(p): ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))}


def internal_graph() -> dict[str, set[str]]:
    """module -> the caddtree modules it imports (a submodule import counts as its module, `a.b.c` -> `a.b` when
    `a.b.c` is not a module)."""
    graph = {}
    for name, tree in MODULES.items():
        deps = set()
        for imp, _ in imports(tree):
            if imp.startswith("caddtree."):
                while imp not in MODULES:
                    imp = imp.rpartition(".")[0]
                if imp != "caddtree" and imp != name:
                    deps.add(imp)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_the_walk_sees_the_whole_package():
    assert {"caddtree.engine", "caddtree.cli", "caddtree.bench.runner", "caddtree.train.command"} <= set(MODULES)
    assert "caddtree.target" in internal_graph()["caddtree.engine"]


def test_no_import_cycle():
    assert find_cycle(internal_graph()) is None, f"import cycle: {' -> '.join(find_cycle(internal_graph()))}"


def test_the_cycle_finder_finds_a_planted_cycle():
    g = internal_graph()
    g["caddtree.tree"] = g["caddtree.tree"] | {"caddtree.engine"}  # engine -> tree -> engine
    assert find_cycle(g) is not None


@pytest.mark.parametrize("name", sorted(PURE_CORE))
def test_pure_core_imports_only_maths(name):
    for imp, _ in imports(MODULES[name]):
        root = imp.split(".")[0]
        if root == "caddtree":
            assert imp in PURE_CORE, f"{name} (pure core) imports {imp}"
        else:
            assert root in PURE_EXTERNAL, f"{name} (pure core) imports {imp}: no file I/O, plotting or model code"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_sit_at_the_top(name):
    """Imports inside functions are only for optional dependencies."""
    for imp, at_top in imports(MODULES[name]):
        assert at_top or imp.split(".")[0] in OPTIONAL, f"{name} imports {imp} inside a function: move it up"


def test_only_cli_imports_bench_and_train():
    for name, deps in internal_graph().items():
        for d in deps:
            owner = ".".join(d.split(".")[:2])  # caddtree.bench.runner -> caddtree.bench
            if owner in ONLY_CLI_IMPORTS:
                assert name in ("caddtree.cli", owner) or name.startswith(owner + "."), f"{name} imports {d}"


def test_profiler_shares_the_round_through_verify_not_the_engine():
    deps = internal_graph()["caddtree.profile"]
    assert "caddtree.verify" in deps and "caddtree.engine" not in deps
