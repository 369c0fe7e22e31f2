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
    references = {"srtf-oracle", "srtf-restart-oracle", "completion-rate-oracle"}
    assert set(m) == {"drf", "tiresias", "lp-bound"} | references
    assert m["lp-bound"] <= min(m[k] for k in m if k != "lp-bound")


def test_table_reports_dl2_share_of_the_oracle_margin() -> None:
    cell = {"penalty": 30.0, "scaling": False, "load": 1.0,
            "avg_jct_s": {"drf": 4000.0, "tiresias": 3900.0, "dl2": 3500.0, "srtf-oracle": 3000.0, "lp-bound": 2000.0}}
    row = G.table([cell])[-1]
    assert "| -12.5% | 50% | -10.3% | 2.00x | 1.75x |" in row
    # a stronger reference makes the share harder to earn: the better of the two oracles sets the margin
    cell["avg_jct_s"]["srtf-restart-oracle"] = 2000.0
    assert "| -12.5% | 25% | -10.3% |" in G.table([cell])[-1]
    cell["avg_jct_s"].update({"srtf-oracle": 4100.0, "srtf-restart-oracle": 4200.0})
    assert "n/a (oracle not below DRF)" in G.table([cell])[-1]


def _cell(load: float, scaling: bool, **m: float | None) -> dict:
    return {"penalty": 150.0, "scaling": scaling, "load": load, "avg_jct_s": m}


def test_targets_check_every_load_the_mean_share_and_tiresias() -> None:
    good = [_cell(0.5, False, drf=100.0, tiresias=90.0, dl2=80.0, **{"srtf-oracle": 70.0, "srtf-restart-oracle": 60.0}),
            _cell(1.0, False, drf=100.0, tiresias=120.0, dl2=90.0, **{"srtf-oracle": 90.0, "srtf-restart-oracle": 95.0})]
    # shares 50% and 100%: mean 75%; worst against Tiresias -11.1%
    assert G.targets(good)[-1] == "| 150 | fixed | 2 of 2 | 75% | -11.1% | yes |"
    above_drf = good + [_cell(2.0, False, drf=100.0, tiresias=150.0, dl2=101.0, **{"srtf-oracle": 99.0})]
    assert G.targets(above_drf)[-1].endswith("| 2 of 3 | 17% | -11.1% | no |")
    near_tiresias = [_cell(0.5, True, drf=100.0, tiresias=90.0, dl2=95.0, **{"srtf-oracle": 90.0})]
    assert G.targets(near_tiresias)[-1] == "| 150 | scaling | 1 of 1 | 50% | +5.6% | no |"
    stalled = good + [_cell(2.0, False, drf=100.0, tiresias=150.0, dl2=None, **{"srtf-oracle": 99.0})]
    assert G.targets(stalled)[-1].endswith("| 2 of 3 (1 stalled) | 75% | -11.1% | no |")
    assert G.targets([_cell(1.0, False, drf=100.0)]) == []  # no DL2 column: nothing to check


def test_shipping_samples_at_several_loads_keep_load_one_as_it_was(tmp_path, capsys, monkeypatch) -> None:
    """evaluate.py --philly N --loads: load 1 is the shipping samples unchanged; other loads are named apart."""
    import json

    import pytest

    import evaluate as E

    assert E._by_load({"philly-30000": 10.0, "philly-30001": 20.0, "philly-30000-load2": 40.0}) == {"1": 15.0, "2": 40.0}
    assert E._loads("1,1.5") == [1.0, 1.5]
    for bad in ("x", "0", ""):
        with pytest.raises(SystemExit, match="--loads"):
            E._loads(bad)
    out = tmp_path / "e.json"
    monkeypatch.setattr(sys, "argv", ["evaluate.py", "--philly", "1", "--loads", "0.1,1", "--baselines", "fifo", "--out", str(out)])
    assert E.main() == 0
    res = json.loads(out.read_text())
    assert res["workloads"] == ["philly-30000", "philly-30000-load0.1"]
    assert "load 0.1:" in capsys.readouterr().err
