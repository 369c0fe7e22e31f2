"""On a real GPU: does the agent's NVML peak match what PyTorch and nvidia-smi say a training job used?

    PYTHONPATH=. python3 benchmarks/agent/nvml_vs_torch.py [--models resnet50,bert-base] [--batch-sizes 32,64]

Needs a CUDA GPU, PyTorch (+ torchvision, transformers) and nvidia-smi. For each model x batch size
it runs the profiling harness (`slurm-liquid estimate profile --device cuda`, a few training steps in
a child process) while this process samples the GPU with the agent's own reader
(`slurm_liquid.agent.gpus.open_reader("nvml")`) every 0.1 s and nvidia-smi every 0.5 s, then writes
one CSV row: the agent's per-process and whole-card peaks, nvidia-smi's per-process peak, and the
harness's `torch.cuda.max_memory_reserved()` / `max_memory_allocated()`, to
benchmarks/agent/data/nvml_vs_torch-<gpu>.csv. Run on an otherwise idle GPU.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from slurm_liquid.agent.gpus import open_reader  # noqa: E402

FIELDS = ["model", "batch-size", "precision", "gpu_name", "agent_process_peak_mib", "agent_card_peak_mib",
          "smi_process_peak_mib", "torch_reserved_mib", "torch_allocated_mib", "harness_nvml_mib",
          "agent_process_over_reserved"]


def smi_used(pid: int) -> float:
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=10).stdout
    used = [float(m) for p, m in (line.split(",") for line in out.splitlines() if "," in line) if int(p) == pid]
    return max(used, default=0.0)


def measure(model: str, batch: int, precision: str, reader) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.csv"
        child = subprocess.Popen([sys.executable, "-m", "slurm_liquid", "estimate", "profile", "--device", "cuda",
                                  "--steps", "5", "--models", model, "--batch-sizes", str(batch),
                                  "--precisions", precision, "--out", str(out)])
        peaks = {"process": 0.0, "card": 0.0, "smi": 0.0}

        def smi_loop() -> None:
            while child.poll() is None:
                peaks["smi"] = max(peaks["smi"], smi_used(child.pid))
                time.sleep(0.5)

        smi = threading.Thread(target=smi_loop, daemon=True)
        smi.start()
        while child.poll() is None:
            for gpu in reader.sample():
                peaks["card"] = max(peaks["card"], gpu.used_mib)
                for proc in gpu.processes:
                    if proc.pid == child.pid:
                        peaks["process"] = max(peaks["process"], proc.used_mib or 0.0, proc.peak_mib or 0.0)
            time.sleep(0.1)
        smi.join()
        if child.returncode != 0:
            raise RuntimeError(f"profiling {model} batch {batch} failed ({child.returncode})")
        row = next(csv.DictReader(out.open()))
    reserved = float(row["reserved_mib"])
    return {"model": model, "batch-size": batch, "precision": precision, "gpu_name": row["gpu_name"],
            "agent_process_peak_mib": round(peaks["process"]), "agent_card_peak_mib": round(peaks["card"]),
            "smi_process_peak_mib": round(peaks["smi"]), "torch_reserved_mib": round(reserved),
            "torch_allocated_mib": round(float(row["allocated_mib"])), "harness_nvml_mib": row["measured_mib"],
            "agent_process_over_reserved": round(peaks["process"] / reserved, 3) if reserved else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,bert-base,gpt2")
    parser.add_argument("--batch-sizes", default="16,64")
    parser.add_argument("--precisions", default="fp32,amp")
    parser.add_argument("--out", type=Path, help="CSV to write (default data/nvml_vs_torch-<gpu>.csv)")
    args = parser.parse_args()
    reader = open_reader("nvml")
    if reader.problem:
        print(f"no GPU readings: {reader.problem}", file=sys.stderr)
        return 2
    rows, failed = [], 0
    for m in args.models.split(","):
        for b in args.batch_sizes.split(","):
            for p in args.precisions.split(","):
                try:
                    rows.append(measure(m, int(b), p, reader))
                except Exception as exc:  # one case that fails (OOM, a missing library) must not lose the others
                    failed += 1
                    rows.append({"model": m, "batch-size": b, "precision": p, "error": str(exc)[:300]})
                print(rows[-1], flush=True)
                name = next((r["gpu_name"] for r in rows if r.get("gpu_name")), "gpu").lower().replace(" ", "-")
                target = args.out or HERE / "data" / f"nvml_vs_torch-{name}.csv"
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("w", newline="") as handle:   # rewritten after every case: a timeout keeps what ran
                    writer = csv.DictWriter(handle, fieldnames=FIELDS + ["error"])
                    writer.writeheader()
                    writer.writerows(rows)
    print(f"wrote {target} ({len(rows) - failed} measured, {failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
