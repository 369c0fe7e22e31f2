"""The GPU benchmark of the estimator's newer keys (benchmarks/estimate/gpu_extras.py) is run rarely,
on a lent GPU machine: every case it measures must be a job the estimator accepts as written, and the
rows it writes must compare like with like."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from slurm_liquid.estimate.api import estimate
from slurm_liquid.jobspec import JobSpec

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "estimate" / "gpu_extras.py"
_spec = importlib.util.spec_from_file_location("gpu_extras", _PATH)
gpu_extras = importlib.util.module_from_spec(_spec)
sys.modules["gpu_extras"] = gpu_extras  # dataclasses look their module up there
_spec.loader.exec_module(gpu_extras)


@pytest.mark.parametrize("case", gpu_extras.CASES, ids=lambda c: c.name)
def test_every_case_is_a_job_the_estimator_sizes(case):
    row = gpu_extras.ask_estimator(case, {}, "h200", tiny=False)
    assert "est_catalog_error" not in row, row
    est = estimate(JobSpec.from_values({"model": case.catalog, **case.spec(), "gpu-type": "h200"}),
                   correction="none")
    assert row["est_catalog_mib"] == est.gpu_mem_mib
    assert est.spec.mode == case.mode and est.spec.micro_batch == case.micro_batch
    if case.adapter != "none":
        assert est.spec.adapter == "lora" and est.spec.rank == case.rank


def test_tiny_cases_keep_the_job_and_shrink_the_model():
    for case in gpu_extras.CASES:
        tiny = case.tiny()
        assert tiny.shape["kind"] == case.shape["kind"]
        assert (tiny.adapter, tiny.attention, tiny.checkpointing, tiny.mode) == \
            (case.adapter, case.attention, case.checkpointing, case.mode)


def test_error_vs_reserved_leaves_out_the_context_and_vs_nvml_keeps_it():
    case = gpu_extras.CASES[0]
    row = gpu_extras.to_row(case, {"reserved_mib": 1000.0, "nvml_proc_mib": 1500.0,
                                   "est_catalog_mib": 1800, "est_catalog_context_mib": 800})
    assert row["err_vs_reserved"] == 0.0
    assert row["err_vs_nvml"] == pytest.approx(0.2)
    assert row["nvml_source"] == "process"


def test_a_failed_case_records_its_error_and_no_error_ratio():
    row = gpu_extras.to_row(gpu_extras.CASES[0], {"error": "OutOfMemoryError: CUDA out of memory",
                                                  "reserved_mib": 140000.0, "est_catalog_mib": 15000})
    assert "OutOfMemoryError" in row["error"]
    assert row["err_vs_reserved"] == "" and row["err_vs_nvml"] == ""
