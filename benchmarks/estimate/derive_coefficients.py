"""Measure the catalogue's activation coefficients (fp32 bytes saved for backward per sample) of the
vision models that torchvision/timm can build, and write them into slurm_liquid/estimate/data/models.json.

Needs torch + torchvision (+ timm for xception), CPU is enough:
    nice /tmp/vtorch/bin/python benchmarks/estimate/derive_coefficients.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from slurm_liquid.estimate.catalog import ModelEntry
from slurm_liquid.estimate.profile import activation_coefficient

MAX_SIDE = 456
DATA = Path(__file__).resolve().parents[2] / "slurm_liquid/estimate/data/models.json"


def main() -> int:
    import torch

    torch.set_num_threads(1)
    doc = json.loads(DATA.read_text())
    for item in doc["models"]:
        if not item.get("builder", "").startswith(("torchvision:", "timm:")):
            continue
        if item.get("act_source", "").startswith("saved-tensor") and "--again" not in sys.argv:
            continue
        entry = ModelEntry.from_mapping(item, "models.json")
        # very large inputs are counted at a smaller side and scaled by pixel count (memory bound)
        side = min(entry.image_size, MAX_SIDE)
        value = activation_coefficient(entry, side) * (entry.image_size / side) ** 2
        item["act_bytes"] = round(value)
        item["act_source"] = (f"saved-tensor count, torch {torch.__version__}, {side}px"
                              + (f" scaled to {entry.image_size}px" if side != entry.image_size else ""))
        print(f"{entry.name:22s} {value / 2**20:9.1f} MiB/sample", file=sys.stderr)
        DATA.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
