"""Derive, from the architecture, the bytes per sample that in-place ReLU6 copies for backward on
PyTorch >= 1.10, and write them into slurm_liquid/estimate/data/models.json (`inplace_copy_bytes`).

    python benchmarks/estimate/inplace_copies.py          # no torch needed; prints the check below

Why: since PyTorch 1.10 the derivative of in-place hardtanh (which `nn.ReLU6(inplace=True)` calls)
reads the op's input, so autograd saves a copy of it (pytorch/pytorch#62329 changed `result` to
`self`; regression report pytorch/pytorch#95432, still open in 2.x). Before 1.10 the op saved its
result, which the next layer saves anyway: no extra memory. The catalogue's activation
coefficients are saved-tensor counts on a current PyTorch, so they include the copies; a job on an
older PyTorch (`torch=1.9` or older) holds that much less.

Among the catalogue's vision builders only torchvision's mobilenet_v2 uses ReLU6 (mobilenet_v3
uses Hardswish and ReLU, mnasnet ReLU, efficientnet SiLU). Its copy term is the size of every
ReLU6 input: the outputs of the stem, expansion, depthwise and last 1x1 convolutions. The shapes
follow torchvision's MobileNetV2 (width 1.0, `inverted_residual_setting` of torchvision/models/
mobilenetv2.py: t, c, n, s). Nothing here is fitted to a measured peak.

Check printed: the same walk also counts every fp32 tensor a training step saves (conv inputs,
batch-norm inputs, the ReLU6 copies, the residual sums) and compares it with the catalogue's
measured saved-tensor count: they agree to within 0.2% only if the copies are there.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "slurm_liquid/estimate/data/models.json"
FP32 = 4

# torchvision MobileNetV2: expansion t, output channels c, repeats n, first stride s
MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1)]


def mobilenet_v2_elements(image_size: int = 224) -> dict[str, int]:
    """Elements per sample of the tensors a training step of torchvision's mobilenet_v2 saves:
    `relu6`: inputs of the ReLU6 layers (each the output of a conv + batch norm); `projection`:
    outputs of the linear 1x1 projections; `image`: the input."""
    side = image_size // 2                      # stem: 3x3 stride-2 conv to 32 channels
    channels = 32
    relu6 = [channels * side * side]
    projection = []
    for t, c, n, s in MOBILENET_V2:
        for i in range(n):
            hidden = channels * t
            if t != 1:                          # 1x1 expansion + ReLU6
                relu6.append(hidden * side * side)
            side = side // (s if i == 0 else 1)
            relu6.append(hidden * side * side)  # 3x3 depthwise + ReLU6
            projection.append(c * side * side)  # 1x1 projection + batch norm, no activation
            channels = c
    relu6.append(1280 * side * side)            # last 1x1 conv + ReLU6
    return {"relu6": sum(relu6), "projection": sum(projection), "image": 3 * image_size * image_size}


def saved_bytes(counts: dict[str, int], copies: bool) -> int:
    """fp32 bytes saved per sample: each conv + BN + ReLU6 keeps the conv output (batch norm's
    input) and the ReLU6 result (the next layer's input), plus the copy when `copies`; each
    projection keeps its conv output and the block's output (batch norm output or residual sum)."""
    per_relu6 = 3 if copies else 2
    return FP32 * (counts["image"] + per_relu6 * counts["relu6"] + 2 * counts["projection"])


def main() -> int:
    doc = json.loads(DATA.read_text())
    entry = next(m for m in doc["models"] if m["name"] == "mobilenet_v2")
    counts = mobilenet_v2_elements(entry.get("image_size", 224))
    copy = FP32 * counts["relu6"]
    measured = entry["act_bytes"]
    for label, copies in (("with copies (torch >= 1.10)", True), ("without copies (torch < 1.10)", False)):
        walk = saved_bytes(counts, copies)
        print(f"mobilenet_v2 saved per sample {label}: {walk / 2**20:.2f} MiB "
              f"({walk / measured - 1:+.1%} vs the catalogue's count {measured / 2**20:.2f} MiB, "
              f"{entry.get('act_source', '')})", file=sys.stderr)
    print(f"mobilenet_v2 in-place ReLU6 copies: {copy / 2**20:.2f} MiB per sample "
          f"({copy / measured:.1%} of the coefficient)", file=sys.stderr)
    entry["inplace_copy_bytes"] = copy
    DATA.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
