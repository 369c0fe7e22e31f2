"""The application model: canonical placements, batch splitting, step times, epochs."""

import pytest
from hypothesis import given, strategies as st

from slurm_liquid.errors import LiquidError
from slurm_liquid.sim.apps import APPLICATIONS, canonical, load_app
from slurm_liquid.sim.oracle import isolated_runtime, packed


@given(st.lists(st.integers(0, 4), min_size=1, max_size=8), st.integers(0, 7))
def test_canonical_is_rotation_invariant_and_drops_zeros(p, shift) -> None:
    rotated = p[shift % len(p):] + p[:shift % len(p)]
    c = canonical(p)
    assert c == canonical(rotated) == canonical(c)
    assert 0 not in c and sorted(c) == sorted(x for x in p if x)


def test_canonical_is_rotation_not_sort() -> None:
    assert canonical((4, 2, 1)) == (1, 4, 2)
    assert canonical((4, 1, 2)) == (1, 2, 4)


@pytest.mark.parametrize("app,target,replicas,atomic,accum,batch", [
    ("bert", 384, 6, 10, 5, 360),
    ("cifar10", 2048, 6, 342, 0, 2052),
    ("ncf", 32768, 1, 16384, 1, 32768),
])
def test_batch_config_examples(app, target, replicas, atomic, accum, batch) -> None:
    c = load_app(app).batch_config(target, replicas)
    assert (c.atomic, c.accum, c.batch) == (atomic, accum, batch)


@given(st.sampled_from(APPLICATIONS), st.integers(1, 64), st.data())
def test_batch_config_respects_limits(name, replicas, data) -> None:
    app = load_app(name)
    if replicas * app.min_local_bsz > app.max_bsz:
        return
    target = data.draw(st.integers(max(app.init_bsz, replicas * app.min_local_bsz), app.max_bsz))
    c = app.batch_config(target, replicas)
    assert c.atomic <= app.max_local_bsz
    assert c.batch <= app.max_bsz


def test_step_time_measured_and_interpolated() -> None:
    app = load_app("cifar10")
    st1, sy1 = app.step_time((1,), 32)
    assert st1 == pytest.approx(0.0427886962890625)
    assert sy1 < st1
    lo, hi = app.step_time((1,), 32)[0], app.step_time((1,), 64)[0]
    mid = app.step_time((1,), 45)[0]
    assert min(lo, hi) <= mid <= max(lo, hi)
    # A fragmented 6-node placement goes through the Delaunay fallback and still answers.
    st6, _ = app.step_time((1, 1, 1, 1, 1, 1), 100)
    assert st6 > 0


def test_step_time_outside_measured_batches_is_an_error() -> None:
    with pytest.raises(LiquidError, match="outside the measured range"):
        load_app("cifar10").step_time((1,), 100000)


def test_cifar_alone_on_six_gpus_takes_910_s() -> None:
    assert round(isolated_runtime(load_app("cifar10"), 2048, 6, 4)) == 910


def test_epoch_boundaries_rise_to_the_target() -> None:
    for name in APPLICATIONS:
        app = load_app(name)
        b = app.epoch_bounds
        assert b[0] == 0 and all(x < y for x, y in zip(b, b[1:]))
        assert len(b) == app.max_epochs + 1


@given(st.integers(1, 64), st.integers(1, 4))
def test_packed(n, g) -> None:
    p = packed(n, g)
    assert sum(p) == n and all(x == g for x in p[:-1]) and 0 < p[-1] <= g


def _rate(app, placement, config, epoch) -> float:
    return app.gain(config.batch, epoch) / app.iteration_time(placement, config)


@pytest.mark.parametrize("name", [a for a in APPLICATIONS if a != "ncf"])
@pytest.mark.parametrize("placement", [(1,), (4,), (4, 4), (4, 4, 4, 4)])
def test_goodput_config_is_valid_and_beats_every_measured_batch(name, placement) -> None:
    app = load_app(name)
    replicas = sum(placement)
    low = max(app.init_bsz, app.min_local_bsz * replicas)
    if low > app.max_bsz:
        return
    for epoch in (0, app.max_epochs // 2, app.max_epochs - 1):
        best = app.goodput_config(placement, epoch)
        assert app.min_local_bsz <= best.atomic <= app.max_local_bsz
        assert low <= best.batch <= app.max_bsz
        # The 50 candidates are geometrically spaced, so a measured batch size between two of
        # them may do a little better; never more than 2%.
        for b in app.valid_bsz:
            fixed = app.batch_config(int(b), replicas)
            if b >= low and app.min_local_bsz <= fixed.atomic <= app.max_local_bsz:
                assert _rate(app, placement, best, epoch) >= 0.98 * _rate(app, placement, fixed, epoch)


def test_goodput_config_grows_the_batch_as_training_goes_on() -> None:
    # The gradient noise grows in later epochs, so larger batches lose less statistical
    # efficiency: the artifact's reason to re-optimise the batch as a job trains.
    app = load_app("cifar10")
    assert app.goodput_config((4, 4), app.max_epochs - 1).batch > app.goodput_config((4, 4), 0).batch
