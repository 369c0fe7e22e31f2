"""slurm_liquid/sim/paper_teachers.py: the candidate teachers for the replica run every job to its end
and keep the replica's rules (per-role cap, no more tasks than the cluster holds)."""

import pytest

import slurm_liquid.sim.paper_teachers as PT
from slurm_liquid.sim.paper import SETTINGS, NODE_SLOTS, PaperHull, PaperRun, Slot, paper_trace  # noqa: E402


@pytest.mark.parametrize("placement", ["artifact", "cpu-first"])
def test_each_family_finishes_a_trace_within_the_caps(placement) -> None:
    setting = SETTINGS["dl2-paper-small"]
    orders = (PT.Ordered("workers-first"), PT.Ordered("bundles-first")) if placement == "artifact" else ()
    for policy in (PT.SRTF(0.8), PT.GainOverRemaining(1.0), PT.ShortFirstDRF(0.25)) + orders:
        trace = paper_trace(setting, 3)
        seen = []

        class Watch:
            name = policy.name

            def reset(self):
                policy.reset()

            def schedule(self, slot: Slot) -> None:
                policy.schedule(slot)
                slot.finish()
                assert all(j.ps <= setting.max_tasks and j.workers <= setting.max_tasks for j in slot.jobs) or \
                    isinstance(policy, PT.ShortFirstDRF)  # its re-split may exceed the per-role cap, as best-split DRF's
                assert (slot.used <= NODE_SLOTS).all()
                seen.append(sum(j.workers for j in slot.jobs))

        result = PaperRun(setting, trace, "t", placement).run(Watch())
        assert len(result.jcts) == setting.jobs and max(seen) > 0


def test_srtf_plans_the_fastest_split_at_its_efficient_size() -> None:
    setting = SETTINGS["dl2-paper-small"]
    job = paper_trace(setting, 0)[0]
    speed, p, w = PT.SRTF(1.0)._plan(job, setting.max_tasks)
    assert speed == max(job.epochs_per_slot(a, b) for a in range(1, 33) for b in range(1, 33))
    small = PT.SRTF(0.5)._plan(job, setting.max_tasks)
    assert small[1] + small[2] <= p + w and small[0] >= 0.5 * speed


def test_the_bound_is_below_every_policy_and_the_cpu_first_order_is_the_placement() -> None:
    setting = SETTINGS["dl2-paper-small"]
    trace = paper_trace(setting, 5_001)
    pooled = PaperRun(setting, trace, "t", "cpu-first").run(PaperHull())
    ordered = PaperRun(setting, trace, "t", "artifact").run(PT.Ordered("cpu-first"))
    assert ordered.jcts == pooled.jcts  # the benchmark's cpu-first order is the cpu-first placement
    assert PT.bound_s(setting, 5_001) <= pooled.avg_jct_s
