"""The DL2 network in numpy: one MLP scoring every row of the state, a softmax policy and a critic.

The state of one decision is a matrix: one row per job in the window plus one "stop" row,
each row the job's features followed by the cluster-wide ones. The same two hidden layers
score every row (weights tied across window slots, so a job's score does not depend on
which slot it sits in), the softmax over the valid rows is the policy, and the critic reads
the mean of the last hidden layer over the present rows. Batches are padded to a common
row count; `present` marks real rows and `valid` the rows that are legal actions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Params = dict[str, np.ndarray]
NEG = -1e9  # logit of an illegal action: exp() underflows to exactly 0


def init_params(inputs: int, hidden: int = 64, layers: int = 2, seed: int = 0) -> Params:
    """He-initialised weights for `layers` hidden layers of `hidden` units (deterministic in `seed`)."""
    rng = np.random.default_rng(seed)
    params: Params = {}
    width = inputs
    for i in range(layers):
        params[f"W{i}"] = rng.normal(0.0, np.sqrt(2.0 / width), (width, hidden))
        params[f"b{i}"] = np.zeros(hidden)
        width = hidden
    params["wp"] = rng.normal(0.0, 0.01, hidden)  # small: the initial policy is near uniform
    params["bp"] = np.zeros(1)
    params["wv"] = rng.normal(0.0, 0.01, hidden)
    params["bv"] = np.zeros(1)
    return params


def n_layers(params: Params) -> int:
    return sum(1 for k in params if k.startswith("W"))


@dataclass
class Forward:
    """What the backward pass needs from the forward one."""

    x: np.ndarray
    pre: list[np.ndarray]  # pre-activations of each hidden layer
    acts: list[np.ndarray]  # their ReLU outputs
    logp: np.ndarray  # (B, R) log-probabilities, NEG-ish where illegal
    prob: np.ndarray  # (B, R)
    pooled: np.ndarray  # (B, H)
    value: np.ndarray  # (B,)
    present: np.ndarray
    valid: np.ndarray


def forward(params: Params, x: np.ndarray, present: np.ndarray, valid: np.ndarray) -> Forward:
    """x: (B, R, D) rows; present, valid: (B, R) booleans. Every state needs one valid row."""
    pre, acts = [], []
    h = x
    for i in range(n_layers(params)):
        z = h @ params[f"W{i}"] + params[f"b{i}"]
        h = np.maximum(z, 0.0)
        pre.append(z)
        acts.append(h)
    logits = np.where(valid, h @ params["wp"] + params["bp"][0], NEG)
    logits = logits - logits.max(axis=1, keepdims=True)
    logz = np.log(np.exp(logits).sum(axis=1, keepdims=True))
    logp = logits - logz
    prob = np.where(valid, np.exp(logp), 0.0)
    count = np.maximum(present.sum(axis=1, keepdims=True), 1)
    pooled = (h * present[..., None]).sum(axis=1) / count
    value = pooled @ params["wv"] + params["bv"][0]
    return Forward(x, pre, acts, logp, prob, pooled, value, present, valid)


def entropy(fw: Forward) -> np.ndarray:
    return -np.where(fw.valid, fw.prob * fw.logp, 0.0).sum(axis=1)


def loss_and_grads(params: Params, fw: Forward, actions: np.ndarray, weights: np.ndarray,
                   targets: np.ndarray | None = None, entropy_coef: float = 0.0,
                   value_coef: float = 0.0) -> tuple[float, Params]:
    """Mean over the batch of -w*log pi(a) - entropy_coef*H + value_coef*(V - target)^2, and its gradient.

    Supervised warm-up: weights 1, no entropy, no value. Actor-critic: weights = advantages.
    """
    b = len(actions)
    rows = np.arange(b)
    ent = entropy(fw)
    loss = float(-(weights * fw.logp[rows, actions]).sum() / b - entropy_coef * ent.sum() / b)
    onehot = np.zeros_like(fw.prob)
    onehot[rows, actions] = 1.0
    # d(-w log p_a)/dlogits = -w (onehot - p);  d(-c H)/dlogits = c p (log p + H)
    dlogits = -weights[:, None] * (onehot - fw.prob)
    if entropy_coef:
        dlogits += entropy_coef * np.where(fw.valid, fw.prob * (fw.logp + ent[:, None]), 0.0)
    dlogits = np.where(fw.valid, dlogits, 0.0) / b
    h = fw.acts[-1]
    grads: Params = {"wp": np.einsum("brh,br->h", h, dlogits), "bp": np.array([dlogits.sum()])}
    dh = dlogits[..., None] * params["wp"]
    if targets is not None and value_coef:
        err = fw.value - targets
        loss += float(value_coef * (err ** 2).sum() / b)
        dv = 2.0 * value_coef * err / b
        grads["wv"] = fw.pooled.T @ dv
        grads["bv"] = np.array([dv.sum()])
        count = np.maximum(fw.present.sum(axis=1), 1)
        dpooled = dv[:, None] * params["wv"] / count[:, None]
        dh = dh + dpooled[:, None, :] * fw.present[..., None]
    else:
        grads["wv"] = np.zeros_like(params["wv"])
        grads["bv"] = np.zeros(1)
    for i in reversed(range(n_layers(params))):
        dz = dh * (fw.pre[i] > 0)
        below = fw.acts[i - 1] if i else fw.x
        grads[f"W{i}"] = np.einsum("brd,brh->dh", below, dz)
        grads[f"b{i}"] = dz.sum(axis=(0, 1))
        if i:
            dh = dz @ params[f"W{i}"].T
    return loss, grads


class Adam:
    """Adam with global-norm gradient clipping; its moments are saved in checkpoints."""

    def __init__(self, params: Params, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8, clip: float = 5.0) -> None:
        self.lr, self.beta1, self.beta2, self.eps, self.clip = lr, beta1, beta2, eps, clip
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params: Params, grads: Params) -> None:
        norm = np.sqrt(sum(float((g ** 2).sum()) for g in grads.values()))
        scale = min(1.0, self.clip / norm) if norm > 0 else 1.0
        self.t += 1
        c1 = 1 - self.beta1 ** self.t
        c2 = 1 - self.beta2 ** self.t
        for k, g in grads.items():
            g = g * scale
            self.m[k] = self.beta1 * self.m[k] + (1 - self.beta1) * g
            self.v[k] = self.beta2 * self.v[k] + (1 - self.beta2) * g * g
            params[k] -= self.lr * (self.m[k] / c1) / (np.sqrt(self.v[k] / c2) + self.eps)

    def state(self) -> dict[str, np.ndarray]:
        out = {f"adam_m_{k}": v for k, v in self.m.items()}
        out.update({f"adam_v_{k}": v for k, v in self.v.items()})
        out["adam_t"] = np.array([self.t])
        return out

    def load_state(self, arrays: dict[str, np.ndarray]) -> None:
        for k in self.m:
            self.m[k] = np.array(arrays[f"adam_m_{k}"], dtype=float)
            self.v[k] = np.array(arrays[f"adam_v_{k}"], dtype=float)
        self.t = int(arrays["adam_t"][0])
