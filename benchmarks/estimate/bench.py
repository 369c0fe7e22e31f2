"""Estimate error against measured peaks, and the whole-process time of `slurm-liquid estimate`.

    nice /tmp/v/bin/python benchmarks/estimate/bench.py            # writes results.md, predictions.csv
    nice /tmp/v/bin/python benchmarks/estimate/bench.py --published # GPU rows of cited sources only (~13 min)
    nice /tmp/v/bin/python benchmarks/estimate/bench.py --prior-only # the prior alone, every dataset (seconds)

Ground truth (benchmarks/estimate/data/):
- published_peaks.csv  GPU measurements from cited sources (measure=nvml: NVML used memory);
- cpu_tensor_peaks.csv the harness on this CPU-only machine (measure=tensor: tensor-level peak,
                       no CUDA context or allocator; compared with the prior's tensor part only);
- gpu_*.csv            the harness on a GPU (`slurm-liquid estimate profile --device cuda`), when run.

For each dataset: the prior alone, and prior x learned correction evaluated out of sample, for
both correction methods (rf, gbr): leave-one-model-out (a model the history lacks; when the set
has at least 3 models) and leave-one-row-out (a new configuration of a model the history has).
Error = (estimate - measured) / measured. Families: CNN (and detection), ViT/DeiT/Swin, language
transformers (training, LoRA/QLoRA, inference), and "transformers, all" = vision + language.
"""

from __future__ import annotations

import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from slurm_liquid.estimate.catalog import load_catalog  # noqa: E402
from slurm_liquid.estimate.learn import estimated_mib, fit_records  # noqa: E402
from slurm_liquid.estimate.history import Record, read_history  # noqa: E402

# vision transformers are reported on their own and counted with the transformers, not the CNNs
GROUPS = {"cnn": "CNN", "detection": "CNN", "vit": "ViT/DeiT/Swin", "encoder": "transformer",
          "decoder": "transformer", "seq2seq": "transformer"}
ALL_TRANSFORMERS = "transformers, all (vision + language)"
QUANTILE = 0.9


def group(record: Record) -> str:
    kind = GROUPS.get(record.entry.family, "other")
    if kind == "transformer" and record.spec.mode == "inference":
        return "transformer inference"
    if kind == "transformer" and record.spec.adapter:
        return "transformer LoRA/QLoRA"
    return kind


def out_of_sample(records: list[Record], method: str, hold: str) -> list[float]:
    """Estimate for each record from a correction fitted without it: without every row of its
    model (`hold="model"`: a model the history lacks) or without that row only (`"row"`: a
    configuration the history lacks, of a model it has)."""
    key = (lambda r: r.entry.name) if hold == "model" else id
    estimates = []
    for held in records:
        train = [r for r in records if key(r) != key(held)]
        estimates.append(estimated_mib(held, fit_records(train, method, QUANTILE)))
    return estimates


def summary(errors: list[float]) -> tuple[float, float, float, int]:
    absolute = [abs(e) for e in errors]
    return (statistics.mean(absolute), statistics.median(absolute),
            sum(e < 0 for e in errors) / len(errors), len(errors))


def error_table(datasets: dict[str, list[Record]], rows_out: list[dict]) -> list[str]:
    lines = ["| dataset | family | rows | estimator | mean rel. error | median | under-estimates | under by > 5% |",
             "|---|---|---:|---|---:|---:|---:|---:|"]
    for name, records in datasets.items():
        variants = {"prior": [r.prior_mib for r in records]}
        holds = ("model", "row") if len({r.entry.name for r in records}) >= 3 else ("row",)
        for method in ("rf", "gbr") if len(records) >= 6 and "--prior-only" not in sys.argv else ():  # fit needs 5 rows besides the held one
            for hold in holds:
                variants[f"prior x {method} ({hold} held out)"] = out_of_sample(records, method, hold)
        for label, estimates in variants.items():
            errors = [(e - r.measured_mib) / r.measured_mib for e, r in zip(estimates, records)]
            for r, e, err in zip(records, estimates, errors):
                rows_out.append({"dataset": name, "estimator": label, "model": r.entry.name,
                                 "batch-size": r.spec.batch_size, "precision": r.spec.precision or "fp32",
                                 "measure": r.measure, "measured_mib": round(r.measured_mib, 1),
                                 "estimate_mib": round(e, 1), "rel_error": round(err, 4)})
            groups = sorted({group(r) for r in records})
            transformer_groups = [g for g in groups if g not in ("CNN", "other")]
            # the transformer total only where it differs from every single group and from "all"
            aggregates = ([ALL_TRANSFORMERS] if 1 < len(transformer_groups) < len(groups) else []) + \
                (["all"] if len(groups) > 1 else [])
            for fam in groups + aggregates:
                sel = [err for err, r in zip(errors, records)
                       if fam == "all" or group(r) == fam or (fam == ALL_TRANSFORMERS and group(r) in transformer_groups)]
                mean, median, under, n = summary(sel)
                far = sum(e < -0.05 for e in sel) / len(sel)
                lines.append(f"| {name} | {fam} | {n} | {label} | {mean:.1%} | {median:.1%} | {under:.0%} | {far:.0%} |")
    return lines


def _time(argv: list[str], runs: int) -> tuple[float, float, float]:
    """Median and p90 wall seconds, and median CPU seconds (user + sys: less sensitive to other
    load on a shared machine) of the whole process."""
    wall, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    wall.sort()
    return statistics.median(wall), wall[int(0.9 * (len(wall) - 1))], statistics.median(cpu)


def timing_table(correction: Path | None, runs: int = 15) -> list[str]:
    # An installed package has bytecode (pip compiles it); this workspace runs with
    # PYTHONDONTWRITEBYTECODE=1, which would recompile every module on every run.
    import compileall

    compileall.compile_dir(str(HERE.parents[1] / "slurm_liquid"), quiet=1)
    exe = str(Path(sys.executable).with_name("slurm-liquid"))
    py = sys.executable
    job = ["estimate", "--model", "resnet50", "--batch-size", "256", "--precision", "amp", "--json"]
    cases = [("python -c pass (interpreter floor)", [py, "-c", "pass"]),
             ("python -c 'import slurm_liquid.cli' (dispatcher imports)", [py, "-c", "import slurm_liquid.cli"]),
             ("slurm-liquid estimate ... --json (prior only)", [exe, *job, "--correction", "none"])]
    if correction:
        cases.append(("slurm-liquid estimate ... --json (with fitted correction)",
                      [exe, *job, "--correction", str(correction)]))
    direct = [py, "-m", "slurm_liquid.estimate", *job[1:]]
    cases.append(("python -m slurm_liquid.estimate ... --json (prior only)",
                  [*direct, "--correction", "none"]))
    if correction:
        cases.append(("python -m slurm_liquid.estimate ... --json (fitted correction)",
                      [*direct, "--correction", str(correction)]))
    lines = [f"Load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (shared machine).", "",
             "| command | wall median s | wall p90 s | CPU (user+sys) median s |", "|---|---:|---:|---:|"]
    for label, argv in cases:
        median, p90, cpu = _time(argv, runs)
        lines.append(f"| {label} | {median:.3f} | {p90:.3f} | {cpu:.3f} |")
    return lines


def main() -> int:
    published = "--published" in sys.argv[1:]
    prior_only = "--prior-only" in sys.argv[1:]
    catalog = load_catalog()
    datasets = {}
    for path in sorted((HERE / "data").glob("published_*.csv" if published else "*.csv")):
        datasets[path.stem] = read_history(path, catalog)
    if len(datasets) > 1:
        # every dataset together: the correction sees more models (leave-one-model-out)
        datasets["pooled"] = [r for records in list(datasets.values()) for r in records]
    rows: list[dict] = []
    lines = ["# Estimate benchmark", "",
             f"Generated by `{' '.join(['nice python benchmarks/estimate/bench.py', *sys.argv[1:]])}` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. "
             "Relative error = (estimate - measured) / measured; under-estimates = share of rows "
             f"with estimate < measured. Learned correction: quantile {QUANTILE}, conformal margin from "
             "folds that hold out whole models, evaluated out of sample.", "",
             "## Error against measured peaks", ""]
    lines += error_table(datasets, rows)
    suffix = ("_published" if published else "") + ("_prior" if prior_only else "")
    with (HERE / f"predictions{suffix}.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if prior_only:
        (HERE / f"results{suffix}.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return 0
    # a correction fitted on all rows, to time the submit path with a model loaded
    every = [r for name, records in datasets.items() if name != "pooled" for r in records]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "correction.json"
        fit_records(every, "gbr", QUANTILE).save(path)
        lines += ["", "## Whole-process time (this machine, 15 runs each)", ""]
        lines += timing_table(path)
        lines += ["", f"Correction file size: {path.stat().st_size / 1024:.0f} KiB (gbr, 150 trees)."]
    suffix = ("_published" if published else "") + ("_prior" if prior_only else "")
    (HERE / f"results{suffix}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
