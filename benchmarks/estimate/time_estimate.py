"""Whole-process time of `slurm-liquid estimate` on the jobs of today (target: < 0.3 s per call).

    nice python benchmarks/estimate/time_estimate.py [--runs 15]     # prints a Markdown table

Each case runs as a fresh process (`python -m slurm_liquid.estimate`, bytecode compiled first as in
an installed package), prior only: a 7B LoRA fine-tune, a model given by config.json, a 70B ZeRO-3
job that does not fit (the advice path sizes every option), a 32k-context inference job, and the
CNN job of earlier benchmarks.
"""

from __future__ import annotations

import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "resnet50 batch 256 amp": ["--model", "resnet50", "--batch-size", "256", "--precision", "amp"],
    "llama-2-7b LoRA micro-batch 1": ["--model", "llama-2-7b", "--adapter", "lora", "--micro-batch", "1",
                                      "--precision", "bf16", "--gpu-type", "a100-40gb"],
    "config.json only (Mistral shape)": ["--hf-config", "{config}", "--micro-batch", "2", "--precision", "bf16"],
    "llama-2-70b ZeRO-3 8x80GB (does not fit: advice)": ["--model", "llama-2-70b", "--micro-batch", "1",
                                                         "--sharding", "zero3", "--gpus", "8", "--precision", "bf16",
                                                         "--checkpointing", "--gpu-type", "a100-80gb"],
    "llama-3-8b inference 32k context": ["--model", "llama-3-8b", "--mode", "inference", "--micro-batch", "4",
                                         "--seq-len", "32768", "--precision", "bf16"],
}
CONFIG = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
          "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000, "tie_word_embeddings": False}


def main() -> int:
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 15
    compileall.compile_dir(str(ROOT / "slurm_liquid"), quiet=1)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lines = [f"Load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {runs} runs each.", "",
             "| job | wall median s | wall p90 s | CPU (user+sys) median s |", "|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(CONFIG))
        floor = [sys.executable, "-c", "pass"]
        for label, args in [("python -c pass (interpreter floor)", None), *CASES.items()]:
            argv = floor if args is None else [sys.executable, "-m", "slurm_liquid.estimate", "--json",
                                               "--correction", "none",
                                               *(a.format(config=config) for a in args)]
            wall, cpu = [], []
            for _ in range(runs):
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
                wall.append(time.perf_counter() - start)
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            wall.sort()
            lines.append(f"| {label} | {statistics.median(wall):.3f} | {wall[int(0.9 * (len(wall) - 1))]:.3f} "
                         f"| {statistics.median(cpu):.3f} |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
