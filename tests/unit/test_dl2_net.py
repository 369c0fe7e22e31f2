"""The DL2 network: gradients match finite differences, Adam learns, seeding is deterministic."""

import numpy as np
import pytest

from slurm_liquid.policy.dl2.net import Adam, forward, init_params, loss_and_grads


def _problem(seed=1):
    rng = np.random.default_rng(seed)
    params = init_params(5, 7, 2, seed=3)
    for k in params:  # move off the near-zero heads so every term has a visible gradient
        params[k] = params[k] + rng.normal(0, 0.2, params[k].shape)
    x = rng.normal(size=(4, 5, 5))
    present = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0]], bool)
    valid = present.copy()
    valid[0, 1] = False
    valid[3, 0] = False
    actions = np.array([0, 4, 1, 3])
    return params, x, present, valid, actions, rng.normal(size=4), rng.normal(size=4)


@pytest.mark.parametrize("entropy,value", [(0.0, 0.0), (0.1, 0.5)])
def test_gradients_match_finite_differences(entropy, value):
    params, x, present, valid, actions, w, y = _problem()

    def loss(p):
        return loss_and_grads(p, forward(p, x, present, valid), actions, w, y, entropy, value)[0]

    _, grads = loss_and_grads(params, forward(params, x, present, valid), actions, w, y, entropy, value)
    worst = 0.0
    for name, p in params.items():
        for idx in np.ndindex(p.shape):
            old = p[idx]
            p[idx] = old + 1e-6
            up = loss(params)
            p[idx] = old - 1e-6
            down = loss(params)
            p[idx] = old
            num = (up - down) / 2e-6
            worst = max(worst, abs(num - grads[name][idx]) / max(1e-7, abs(num) + abs(grads[name][idx])))
    assert worst < 1e-4


def test_illegal_actions_get_zero_probability_and_probabilities_sum_to_one():
    params, x, present, valid, *_ = _problem()
    fw = forward(params, x, present, valid)
    assert np.all(fw.prob[~valid] == 0)
    assert np.allclose(fw.prob.sum(axis=1), 1.0)


def test_adam_fits_a_fixed_choice():
    params, x, present, valid, actions, *_ = _problem()
    opt = Adam(params, lr=1e-2)
    first = None
    for _ in range(200):
        loss, grads = loss_and_grads(params, forward(params, x, present, valid), actions, np.ones(4))
        first = loss if first is None else first
        opt.step(params, grads)
    fw = forward(params, x, present, valid)
    assert (fw.logp.argmax(axis=1) == actions).all()
    assert loss < first / 10


def test_initialisation_is_deterministic_in_the_seed():
    a, b, c = init_params(24, 16, 2, seed=7), init_params(24, 16, 2, seed=7), init_params(24, 16, 2, seed=8)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["W0"], c["W0"])
