"""Baseline policies on hand-made cluster views (no simulator involved)."""

from hypothesis import given, settings, strategies as st

from slurm_liquid.loop import PlaceStage
from slurm_liquid.placement.greedy import MostFreeGreedy
from slurm_liquid.views import Action, ClusterView, JobView, NodeView, changed
from slurm_liquid.policy.drf import DRF
from slurm_liquid.policy.fifo import FifoBackfill
from slurm_liquid.policy.optimus import Optimus
from slurm_liquid.policy.tiresias import Tiresias

NODES = tuple(NodeView(f"n{i}", 4) for i in range(4))  # 16 GPUs


def view(jobs, now=600.0):
    return ClusterView(now, NODES, tuple(jobs))


def placed(policy, v):
    """The policy's counts through the loop's place stage (the artifact's greedy rule)."""
    return PlaceStage(MostFreeGreedy()).place(v, policy.decide(v))


def gpus_of(actions):
    return {a.job: a.gpus for a in actions}


def used_per_node(v, actions):
    alloc = {j.id: j.allocation for j in v.jobs}
    alloc.update({a.job: a.allocation for a in actions})
    used = {}
    for a in alloc.values():
        for node, g in a:
            used[node] = used.get(node, 0) + g
    return used


def test_fifo_backfills_short_job_but_not_long_one() -> None:
    running = JobView("r", 0, 12, allocation=(("n0", 4), ("n1", 4), ("n2", 4)), started_at=0, time_limit_s=1000)
    head = JobView("head", 10, 15, time_limit_s=500)  # blocked until r ends at t=1000; leaves 1 spare
    short = JobView("short", 20, 2, time_limit_s=300)  # ends at 900 < 1000: may jump ahead
    long_ = JobView("long", 30, 2, time_limit_s=5000)  # would delay head (needs 2 > 1 spare): waits
    tiny = JobView("tiny", 40, 1, time_limit_s=5000)  # fits the spare GPU the head leaves: may start
    actions = placed(FifoBackfill(), view([running, head, short, long_, tiny]))
    assert gpus_of(actions) == {"short": 2, "tiny": 1}


def test_fifo_without_limits_never_jumps_the_head() -> None:
    running = JobView("r", 0, 12, allocation=(("n0", 4), ("n1", 4), ("n2", 4)))
    head = JobView("head", 10, 16)
    small = JobView("small", 20, 1)
    assert placed(FifoBackfill(), view([running, head, small])) == []
    # Past Slurm's backfill window (the running job never ends) the head holds no reservation.
    assert gpus_of(placed(FifoBackfill(window_s=86400), view([running, head, small]))) == {"small": 1}


def test_fifo_never_preempts() -> None:
    running = JobView("r", 0, 16, allocation=tuple((n.name, 4) for n in NODES), started_at=0)
    assert placed(FifoBackfill(), view([running, JobView("new", 5, 1)])) == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 16), st.booleans()), min_size=1, max_size=12))
def test_drf_is_max_min_fair(specs) -> None:
    jobs = [JobView(f"j{i}", i, g, max_gpus=g if elastic else None) for i, (g, elastic) in enumerate(specs)]
    v = view(jobs)
    counts = DRF().allocate(v)
    assert sum(counts) <= 16
    for job, n in zip(jobs, counts):
        assert n == 0 or (job.min_gpus if job.elastic else job.gpus) <= n <= job.upper
    # No elastic job could take a GPU from one holding two or more GPUs more than it.
    for i, (job, n) in enumerate(zip(jobs, counts)):
        if job.elastic and 0 < n < job.upper:
            assert all(m <= n + 1 for k, m in enumerate(counts) if jobs[k].elastic and k != i)
    actions = placed(DRF(), v)
    assert all(g <= 4 for g in used_per_node(v, actions).values())
    assert {k: sum(g for _, g in a) for k, a in changed(v, actions).items()} == {j.id: n for j, n in zip(jobs, counts) if n}


def test_tiresias_demotes_after_threshold_and_new_jobs_preempt() -> None:
    pol = Tiresias(threshold_gpu_s=4 * 600)
    big = JobView("big", 0, 16)
    a1 = placed(pol, view([big], now=60))
    assert gpus_of(a1) == {"big": 16}
    big = JobView("big", 0, 16, allocation=a1[0].allocation)
    assert placed(pol, view([big], now=120)) == []  # 16 GPUs x 60 s < threshold? no: 960 < 2400, stays
    # After 3 more minutes big has 16 x 240 = 3840 GPU-s >= 2400: it falls to Q1, and a new job
    # in Q0 that needs the GPUs preempts it.
    new = JobView("new", 200, 4)
    actions = {a.job: a for a in placed(pol, view([big, new], now=300))}
    assert actions["big"].allocation == () and actions["new"].gpus == 4


def test_tiresias_keeps_running_jobs_in_place() -> None:
    pol = Tiresias()
    a = JobView("a", 0, 6)
    first = placed(pol, view([a], now=60))
    a = JobView("a", 0, 6, allocation=first[0].allocation)
    assert placed(pol, view([a, JobView("b", 70, 4)], now=120)) == [Action("b", (("n2", 4),))]


class Linear:
    """A made-up speed model: perfect scaling up to `knee` GPUs, flat after."""

    def __init__(self, knee):
        self.knee = knee

    def iteration_time(self, job, gpus):
        return 1.0 / min(gpus, self.knee[job.id])

    def remaining_iterations(self, job):
        return 1000.0


def test_optimus_gives_gpus_where_they_help() -> None:
    jobs = [JobView("a", 0, 1, max_gpus=16, app="x"), JobView("b", 1, 1, max_gpus=16, app="x")]
    counts = Optimus(Linear({"a": 2, "b": 12})).allocate(view(jobs))
    assert counts == [2, 12]  # a stops gaining past 2 GPUs; the rest are worth nothing
    counts = Optimus(Linear({"a": 16, "b": 16})).allocate(view(jobs))
    assert counts == [8, 8]


def test_optimus_everyone_gets_one_gpu_first_in_arrival_order() -> None:
    jobs = [JobView(f"j{i}", i, 1, max_gpus=4, app="x") for i in range(20)]
    counts = Optimus(Linear({f"j{i}": 4 for i in range(20)})).allocate(view(jobs))
    assert counts == [1] * 16 + [0] * 4
