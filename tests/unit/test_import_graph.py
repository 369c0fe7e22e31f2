"""The architecture, checked on the import graph (every import, also those inside functions).

- The daemon never reaches the simulator: what it knows of a job's speed comes from the speed room.
- Policies decide GPU counts only: no policy module reaches a placer (`slurm_liquid.placement`
  beyond the plain state types in `placement.base`).
- The simulator and the daemon run the one loop (`slurm_liquid.loop`).
- No policy imports the simulator (`POLICY_SIM_IMPORTS` are the ones left to move), and the DL2 paper
  replica's world (`slurm_liquid.psworld`) sits below both.
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


# Policy modules that import the simulator today, outside the paper replica (to be moved below it).
POLICY_SIM_IMPORTS = {"slurm_liquid.policy.dl2.cli", "slurm_liquid.policy.dl2.train"}


def test_no_policy_module_imports_the_simulator() -> None:
    policies = [m for m in MODULES if m.startswith("slurm_liquid.policy")]
    assert "slurm_liquid.policy.dl2.psworker" in policies and "slurm_liquid.policy.dl2.psworker_train" in policies
    for module in policies:
        if module not in POLICY_SIM_IMPORTS:
            reached = sorted(m for m in imports(module) if m.startswith("slurm_liquid.sim"))
            assert not reached, f"{module} imports {reached}"


def test_the_paper_world_sits_below_both_the_policy_and_the_simulator() -> None:
    # the replica's world is imported by DL2's PS/worker policy and by the simulator's replica, never the reverse
    world = [m for m in MODULES if m.startswith("slurm_liquid.psworld")]
    assert len(world) >= 4
    for module in world:
        reached = sorted(m for m in closure(module) if m.startswith(("slurm_liquid.sim", "slurm_liquid.policy")))
        assert not reached, f"{module} reaches {reached}"
    # and the PS/worker policy reaches no simulator module (its training reaches one only through
    # POLICY_SIM_IMPORTS' policy.dl2.train, for its supervised step)
    assert not [m for m in closure("slurm_liquid.policy.dl2.psworker") if m.startswith("slurm_liquid.sim")]
    assert "slurm_liquid.policy.dl2.psworker" not in closure("slurm_liquid.sim.paper_policies")
