"""The architecture, checked on the import graph (every import, also those inside functions).

- The daemon never reaches the simulator: what it knows of a job's speed comes from the speed room.
- Policies decide GPU counts only: no policy module reaches a placer (`slurm_liquid.placement`
  beyond the plain state types in `placement.base`).
- The simulator and the daemon run the one loop (`slurm_liquid.loop`).
- The rooms that schedule stand in layers (`LAYERS`: speed < policy < loop < sim < training, the shared
  types in `slurm_liquid.views` below them all): no import upward, no cycle, no module over 400 lines.
  The DL2 paper replica's world (`slurm_liquid.psworld`) sits below both the policy and the simulator.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "slurm_liquid"


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_of(p): p for p in ROOT.rglob("*.py")}


@cache
def imports(module: str) -> frozenset[str]:
    """The project modules `module` imports anywhere in its body."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            # A module and every package above it run when it is imported.
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                candidate = ".".join(parts[:i])
                if candidate in MODULES and candidate != module:
                    found.add(candidate)
    return frozenset(found)


def closure(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(imports(module))
    return seen


def test_the_graph_sees_lazy_imports() -> None:
    # sim.cli imports the runner inside a function: the graph must still see it (else it proves nothing).
    assert "slurm_liquid.sim.runner" in imports("slurm_liquid.sim.cli")


def test_the_daemon_never_imports_the_simulator() -> None:
    daemon = [m for m in MODULES if m.startswith("slurm_liquid.daemon")]
    assert daemon
    for module in daemon:
        reached = sorted(m for m in closure(module) if m.startswith("slurm_liquid.sim"))
        assert not reached, f"{module} reaches {reached}"


def test_policies_own_no_placer() -> None:
    policies = [m for m in MODULES if m.startswith("slurm_liquid.policy") and not m.endswith((".cli", ".train"))]
    for module in policies:
        placers = sorted(m for m in imports(module) if m.startswith("slurm_liquid.placement")
                         and m not in ("slurm_liquid.placement", "slurm_liquid.placement.base"))
        assert not placers, f"{module} imports {placers}"


def test_the_simulator_and_the_daemon_share_one_loop() -> None:
    assert "slurm_liquid.loop.core" in closure("slurm_liquid.sim.backend")
    assert "slurm_liquid.loop.core" in closure("slurm_liquid.daemon.elastic")
    assert "slurm_liquid.sim.backend" in closure("slurm_liquid.sim.engine")


# The rooms that schedule, bottom to top: a module imports its own floor and those below, never above.
# The ground-floor types (`slurm_liquid.views`) sit under all of them; the daemon stands beside the
# simulator on the loop, and never reaches it (above).
LAYERS = ("slurm_liquid.speed", "slurm_liquid.policy", "slurm_liquid.loop", "slurm_liquid.sim", "slurm_liquid.training")


def runtime_imports(module: str) -> frozenset[str]:
    """`imports`, less those under `if TYPE_CHECKING:` (types for annotations, never run)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(), str(path))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if name in MODULES and name != module:
                found.add(name)
            elif name.rpartition(".")[0] in MODULES and name.rpartition(".")[0] != module:
                found.add(name.rpartition(".")[0])
    return frozenset(found)


def layer(module: str) -> int | None:
    for i, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return i
    return None


def test_no_room_imports_a_room_above_it() -> None:
    upward = []
    for module in MODULES:
        own = layer(module)
        if own is None:
            continue
        for target in imports(module):
            other = layer(target)
            if other is not None and other > own:
                upward.append(f"{module} -> {target}")
    assert not upward, upward


def test_the_daemon_stands_on_the_loop_not_on_the_simulator_or_training() -> None:
    for module in (m for m in MODULES if m.startswith("slurm_liquid.daemon")):
        assert not [m for m in imports(module) if layer(m) is not None and layer(m) > LAYERS.index("slurm_liquid.loop")], module


def test_the_scheduling_rooms_have_no_import_cycle() -> None:
    rooms = [m for m in MODULES if layer(m) is not None or m.startswith("slurm_liquid.daemon")]
    graph = {m: {t for t in runtime_imports(m) if t in rooms and not (m.startswith(t + ".") and MODULES[t].name == "__init__.py")}
             for m in rooms}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, path: list[str]) -> bool:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle.extend(path[path.index(t):] + [t] if t in path else [m, t])
                return True
            if t not in state and visit(t, path + [t]):
                return True
        state[m] = 2
        return False

    for m in sorted(rooms):
        if m not in state and visit(m, [m]):
            break
    assert not cycle, " -> ".join(cycle)


def test_the_scheduling_rooms_are_short_modules() -> None:
    long = {m: n for m, p in MODULES.items() if (layer(m) is not None or m.startswith("slurm_liquid.daemon"))
            and (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


def test_the_paper_world_sits_below_both_the_policy_and_the_simulator() -> None:
    # the replica's world is imported by DL2's PS/worker policy and by the simulator's replica, never the reverse
    world = [m for m in MODULES if m.startswith("slurm_liquid.psworld")]
    assert len(world) >= 4
    for module in world:
        reached = sorted(m for m in closure(module) if m.startswith(("slurm_liquid.sim", "slurm_liquid.policy")))
        assert not reached, f"{module} reaches {reached}"
    # and the PS/worker policy reaches no simulator module (no policy module does: the layers above)
    assert not [m for m in closure("slurm_liquid.policy.dl2.psworker") if m.startswith("slurm_liquid.sim")]
    assert "slurm_liquid.policy.dl2.psworker" not in closure("slurm_liquid.sim.paper_policies")
