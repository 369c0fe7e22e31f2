"""Import containers/cluster (a script without .py) as a module, for its tests."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "containers" / "cluster"


def load() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("liquid_cluster_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
