"""`slurm-liquid admin shadow`: shadow mode's figures from sacct lines (made with the ledger's own codecs)."""

from __future__ import annotations

from slurm_liquid.admin import shadow
from slurm_liquid.ledger import Record, Tag, TagState, Usage, with_usage

LEAF = {"gpu01": "leaf1", "gpu02": "leaf1", "gpu03": "leaf2", "gpu04": "leaf2"}


def line(job: int, nodelist: str, would: str | None, est: str | None, peak: int | None, user_text: str = "") -> str:
    tag = Tag.parse("liquid/1 state=shadow").to(TagState.SHADOWED, extra={"would": would}) if would else \
        Tag.parse("liquid/1 state=untouched")
    admin = tag.render()
    if peak is not None:
        admin = with_usage(admin, Usage(by="nvml", gpus=1, peak_mib=peak, util=50.0, nodes=("gpu01",)))
    record = Record(user=user_text).with_fields(mode="advise", **({"est": est} if est else {}))
    return shadow.SEP.join([str(job), nodelist, admin, record.render()])


def test_placement_and_estimate_figures() -> None:
    lines = [
        line(1, "gpu[01,03]", "gpu[01-02]:2", "2xh100-80gb:20G", 30 * 1024, "sweep | 42"),  # over the estimate
        line(2, "gpu01", "gpu01:1", "1xh100-80gb:40G", 20 * 1024),
        line(3, "gpu02", "wait", None, None),
        line(4, "gpu04", None, "1xh100-80gb:10G", 5 * 1024),     # not shadowed, measured
        shadow.SEP.join(["5", "gpu01", "", "my own comment"]),   # no liquid record: not counted
    ]
    f = shadow.figures(lines, LEAF.get).to_json()
    assert (f["jobs"], f["shadowed"], f["same_nodes"], f["would_wait"]) == (4, 3, 1, 1)
    assert f["mean_leaves_would"] == 1.0 and f["mean_leaves_slurm"] == 1.5
    assert (f["multi_leaf_would"], f["multi_leaf_slurm"]) == (0, 1)
    assert f["measured"] == 3 and f["under_estimated"] == 1 and f["median_peak_over_estimate"] == 0.5
    text = shadow.render(f, 7)
    assert "same nodes as Slurm for 1" in text and "above the estimate: 1 (33.3%)" in text


def test_no_topology_and_no_jobs() -> None:
    f = shadow.figures([line(1, "gpu01", "gpu02:1", None, None)], None).to_json()
    assert f["shadowed"] == 1 and f["mean_leaves_would"] is None and f["measured"] == 0
    assert "no job with both" in shadow.render(f, 7)
    assert "no shadowed GPU job" in shadow.render(shadow.figures([], None).to_json(), 1)
