"""The architecture as a test: every import in src/mcprl points down the flow, and no module imports
itself back through others. An `ast` walk, so imports inside functions count as much as top-level ones."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

# Top to bottom of the flow: a package may import its own modules and the packages of the lines above it.
# Packages on one line do not import each other.
LAYERS: list[set[str]] = [
    {"__init__", "_skyrl", "errors", "episode", "redact", "aio", "metric_names", "options", "protocol"},
    {"servers"},
    {"tools"},
    {"models"},
    {"inference"},
    {"rewards"},
    {"envs", "data"},
    {"eval", "integrations"},
    {"training"},
    {"cli"},
]
# What a package must not import from outside mcprl either: analysis of trajectory files runs anywhere.
FORBIDDEN_THIRD_PARTY = {"eval": {"torch", "transformers", "peft", "skyrl"}, "inference": {"skyrl"}}


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (SRC / "mcprl").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> tuple[set[str], set[str]]:
    """(mcprl modules, third-party top-level names) that `module` imports anywhere in its body."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    ours, theirs = set(), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names] if base.startswith("mcprl") else [base]
        else:
            continue
        for name in names:
            if name == "mcprl" or name.startswith("mcprl."):
                target = _resolve(name)
                if target and target != module:
                    ours.add(target)
            elif name:
                theirs.add(name.split(".")[0])
    return ours, theirs


def _package(module: str) -> str:
    parts = module.split(".")
    if parts[-1] == "__main__":
        return "cli"  # `python -m mcprl.X` is an entry point, like the CLI
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(package: str) -> int:
    for index, names in enumerate(LAYERS):
        if package in names:
            return index
    raise AssertionError(f"package mcprl.{package} is on no line of LAYERS: add it where it belongs in the flow")


def test_every_import_points_down_the_flow() -> None:
    upward = []
    for module in sorted(MODULES):
        source = _package(module)
        for target in sorted(_imports(module)[0]):
            dest = _package(target)
            if dest == source and not target.endswith("__main__"):
                continue
            if _layer(dest) >= _layer(source):
                upward.append(f"{module} -> {target}")
    assert not upward, "imports against the flow (see LAYERS):\n" + "\n".join(upward)


@pytest.mark.parametrize("package", sorted(FORBIDDEN_THIRD_PARTY))
def test_light_packages_stay_light(package: str) -> None:
    heavy = {f"{m} imports {name}" for m in MODULES if _package(m) == package
             for name in _imports(m)[1] & FORBIDDEN_THIRD_PARTY[package]}
    assert not heavy, sorted(heavy)


def test_one_module_imports_skyrl() -> None:
    """SkyRL's version quirks (the 3.11 shim, 0.3.0's names) live in mcprl._skyrl; skyrl_gym, the env
    interface, is free to import."""
    direct = sorted(m for m in MODULES if m != "mcprl._skyrl" and "skyrl" in _imports(m)[1])
    assert not direct, f"import skyrl through mcprl._skyrl: {direct}"


def test_no_import_cycle() -> None:
    graph = {module: _imports(module)[0] for module in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_checks_see_a_violation() -> None:
    """The walker itself: known edges are found, so a silent parse cannot pass the tests above."""
    assert "mcprl.protocol.parsing" in _imports("mcprl.rewards.heuristic")[0]
    assert "torch" in _imports("mcprl.inference.engine")[1]
    assert _layer(_package("mcprl.servers.__main__")) == _layer("cli")
