"""The generalisation table command (benchmarks/dl2/generalise.py): loads, held-out seeds, the table."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "dl2"))
import generalise as G  # noqa: E402


def test_loads_scale_the_job_count_in_the_same_eight_hours() -> None:
    for load, jobs in ((0.5, 80), (1.0, 160), (2.0, 320)):
        specs = G.workload(load, G.FIRST_SEED)
        assert len(specs) == jobs
        assert max(s.time for s in specs) < 8 * 3600
    # held out from training (0, 10000), RL validation (20000) and the shipping decision (30000)
    assert G.FIRST_SEED >= 40_000


def test_cell_runs_every_policy_the_reference_and_the_bound(monkeypatch) -> None:
    monkeypatch.setattr(G, "BASE_JOBS", 12)  # a 12-job workload keeps the test short
    cell = G.run_cell(1.0, [G.FIRST_SEED], 30.0, False, ["drf", "tiresias"], True, None)
    m = cell["avg_jct_s"]
    assert set(m) == {"drf", "tiresias", "srtf-oracle", "lp-bound"}
    assert m["lp-bound"] <= min(m["drf"], m["tiresias"], m["srtf-oracle"])


def test_table_reports_dl2_share_of_the_oracle_margin() -> None:
    cell = {"penalty": 30.0, "scaling": False, "load": 1.0,
            "avg_jct_s": {"drf": 4000.0, "tiresias": 3900.0, "dl2": 3500.0, "srtf-oracle": 3000.0, "lp-bound": 2000.0}}
    row = G.table([cell])[-1]
    assert "| -12.5% | 50% | -10.3% | 2.00x | 1.75x |" in row
