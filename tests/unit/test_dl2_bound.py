"""The LP lower bound (slurm_liquid/sim/bound.py): below every policy, tight on a lone job."""

import pytest

from slurm_liquid.policy import POLICY_NAMES, make_policy
from slurm_liquid.sim.engine import ClusterConfig, Simulator
from slurm_liquid.sim.oracle import OracleSpeedModel
from slurm_liquid.sim.workload import JobSpec

from slurm_liquid.policy.rate import CompletionRate
from slurm_liquid.policy.srtf import SRTF, SRTFRestart
from slurm_liquid.sim.bound import envelope, job_bounds, lp_bound

# the benchmark's oracle references (benchmarks/dl2/reference.py): these rules on the oracle speed model
REFERENCES = {"srtf-oracle": SRTF, "srtf-restart-oracle": SRTFRestart, "completion-rate-oracle": CompletionRate}

SMALL = [JobSpec("c0", 0, "cifar10", 6, 2048), JobSpec("b1", 40, "bert", 8, 384),
         JobSpec("n2", 100, "ncf", 1, 32768), JobSpec("c3", 130, "cifar10", 12, 4096),
         JobSpec("d4", 200, "deepspeech2", 6, 320), JobSpec("c5", 650, "cifar10", 8, 2048),
         JobSpec("n6", 700, "ncf", 1, 32768), JobSpec("b7", 900, "bert", 16, 384)]


def test_envelope_is_concave_and_stops_at_its_peak() -> None:
    # speed-ups with a dip at 3 and a fall after 5
    hull = envelope([0, 1.0, 1.9, 2.0, 3.6, 4.0, 3.5])
    assert hull[0] == (1, 1.0) and hull[-1] == (5, 4.0)
    assert (3, 2.0) not in hull  # under the chord from 2 to 4
    slopes = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(((0, 0.0),) + hull, hull)]
    assert all(x >= y for x, y in zip(slopes, slopes[1:]))


@pytest.mark.parametrize("penalty", [30.0, 150.0])
def test_bound_is_below_every_policy(penalty) -> None:
    config = ClusterConfig(nodes=4, restart_penalty=penalty)
    bound = lp_bound(SMALL, config, step=60)
    speed = OracleSpeedModel(config.gpus_per_node)
    policies = [make_policy(p, speed) for p in POLICY_NAMES] + [cls(speed) for cls in REFERENCES.values()]
    for policy in policies:
        jct = Simulator(SMALL, config).run(policy).avg_jct_s
        assert bound <= jct, policy.name
    # and not vacuous: within a factor 2 of the best policy here
    best = min(Simulator(SMALL, config).run(p).avg_jct_s for p in policies)
    assert bound > 0.5 * best


def test_bound_holds_with_batch_scaling() -> None:
    config = ClusterConfig(nodes=4, batch_scaling=True)
    speed = OracleSpeedModel(config.gpus_per_node, batch_scaling=True)
    bound = lp_bound(SMALL, config, step=60)
    for name in ("drf", "optimus", "tiresias"):
        assert bound <= Simulator(SMALL, config).run(make_policy(name, speed)).avg_jct_s, name


def test_lone_job_bound_is_tight() -> None:
    # cifar10 alone on 6 packed GPUs: JCT 947 s (wait to the tick 7 s + 30 s + 910 s). The bound lets it
    # use its best GPU count (up to 64) and its best placement, so it must be lower but not by much.
    job = JobSpec("c0", 53, "cifar10", 6, 2048)
    config = ClusterConfig()
    bound = lp_bound([job], config, step=60)
    (jb,) = job_bounds([job], config)
    assert jb.earliest == 90
    # alone, the job runs at full speed from its earliest start; the grid places each minute's work at the
    # minute's start, which costs about half a step
    exact = jb.earliest - 53 + jb.shortest - jb.epochs / 2
    assert exact - 40 <= bound <= exact
    assert 37 < bound < 947


def test_more_penalty_raises_the_bound() -> None:
    low = lp_bound(SMALL, ClusterConfig(nodes=4, restart_penalty=30), step=120)
    high = lp_bound(SMALL, ClusterConfig(nodes=4, restart_penalty=150), step=120)
    assert high == pytest.approx(low + 120, abs=1)  # one restart per job, nothing else
