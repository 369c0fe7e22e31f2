"""benchmarks/dl2/paper_teachers.py: the candidate teachers for the replica run every job to its end
and keep the replica's rules (per-role cap, no more tasks than the cluster holds)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "dl2"))
import paper_teachers as PT  # noqa: E402

from slurm_liquid.sim.paper import SETTINGS, NODE_SLOTS, PaperRun, Slot, paper_trace  # noqa: E402


def test_each_family_finishes_a_trace_within_the_caps() -> None:
    setting = SETTINGS["dl2-paper-small"]
    for policy in (PT.SRTF(0.8), PT.GainOverRemaining(1.0), PT.ShortFirstDRF(0.25), PT.Hull("workers-first"),
                   PT.Hull("bundles-first")):
        trace = paper_trace(setting, 3)
        seen = []

        class Watch:
            name = policy.name

            def reset(self):
                policy.reset()

            def schedule(self, slot: Slot) -> None:
                policy.schedule(slot)
                assert all(j.ps <= setting.max_tasks and j.workers <= setting.max_tasks for j in slot.jobs) or \
                    isinstance(policy, PT.ShortFirstDRF)  # its re-split may exceed the per-role cap, as best-split DRF's
                assert (slot.used <= NODE_SLOTS).all()
                seen.append(sum(j.workers for j in slot.jobs))

        result = PaperRun(setting, trace, "t").run(Watch())
        assert len(result.jcts) == setting.jobs and max(seen) > 0


def test_srtf_plans_the_fastest_split_at_its_efficient_size() -> None:
    setting = SETTINGS["dl2-paper-small"]
    job = paper_trace(setting, 0)[0]
    speed, p, w = PT.SRTF(1.0)._plan(job, setting.max_tasks)
    assert speed == max(job.epochs_per_slot(a, b) for a in range(1, 33) for b in range(1, 33))
    small = PT.SRTF(0.5)._plan(job, setting.max_tasks)
    assert small[1] + small[2] <= p + w and small[0] >= 0.5 * speed


def test_the_bound_is_below_every_policy() -> None:
    setting = SETTINGS["dl2-paper-small"]
    trace = paper_trace(setting, 10_001)
    best = min(PaperRun(setting, trace, "t").run(p).avg_jct_s for p in (PT.Hull("ideal"), PT.Hull("cpu-first")))
    assert PT.bound_s(setting, 10_001) <= best
