"""The profiling harness runs only where PyTorch is installed (never needed at submit time)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the harness is optional")

from slurm_liquid.estimate.catalog import load_catalog  # noqa: E402
from slurm_liquid.estimate.profile import Config, import_torchvision, run_config  # noqa: E402

try:
    import_torchvision()
except ImportError:
    pytest.skip("torchvision is not installed: the harness is optional", allow_module_level=True)


def test_cpu_row_is_labelled_tensor_level():
    entry = load_catalog().lookup("mobilenet_v3_small")
    row = run_config(entry, Config(entry.name, 2, image_size=64, steps=1), "cpu")
    assert row["measure"] == "tensor" and "no GPU" in row["gpu_name"]
    params_mib = entry.params * 4 / 2 ** 20
    assert row["measured_mib"] > 2 * params_mib      # weights + grads + Adam state at least
