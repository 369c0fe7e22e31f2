"""DL2 (Peng et al., 2019): a learned elastic scheduler, warm-started from an existing one, then RL.

`make_dl2()` builds the policy for the simulator and the daemon; training lives in
`slurm_liquid.policy.dl2.train` and the `slurm-liquid policy` command.
"""

from __future__ import annotations

from pathlib import Path

from slurm_liquid.views import SpeedModel
from slurm_liquid.policy.dl2.agent import DL2Policy


def window_order_of(meta: dict) -> str:
    """The window order a policy file was trained with (files from before the choice: arrival)."""
    from slurm_liquid.errors import UsageError
    from slurm_liquid.policy.dl2.state import WINDOW_ORDERS

    order = meta.get("window_order", "arrival")
    if order not in WINDOW_ORDERS:
        raise UsageError(f"policy file has window_order {order!r}; this slurm-liquid knows {', '.join(WINDOW_ORDERS)}")
    return order


def start_margin_of(meta: dict) -> float:
    """The restart-aware teacher's rank margin a policy file was trained with (older files: 0)."""
    import math

    from slurm_liquid.errors import UsageError

    value = meta.get("start_margin", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 100:
        raise UsageError(f"policy file has start_margin {value!r}; give a number of restart penalties from 0 to 100")
    return float(value)


def rate_of(meta: dict) -> bool:
    """Whether a policy file was taught by the completion-rate teacher, whose RATE column it reads."""
    from slurm_liquid.errors import UsageError

    value = meta.get("rate_column", False)
    if not isinstance(value, bool):
        raise UsageError(f"policy file has rate_column {value!r}; give true or false")
    return value


def make_dl2(policy_file: str | Path | None = None, speed: SpeedModel | None = None,
             world: str = "reference") -> DL2Policy:
    """A greedy (deterministic) DL2 policy from `policy_file`, or from the shipped file for `world`:
    under the daemon's rules the file trained under them, else the one trained for the restart
    penalty nearest to the simulated one (chosen at the first decision)."""
    if policy_file is None:
        return DL2Policy(None, speed=speed, world=world)
    from slurm_liquid.policy.dl2.io import load_policy

    params, meta = load_policy(policy_file)
    return DL2Policy(params, window=int(meta["window"]), order=window_order_of(meta),
                     speed=speed if meta.get("speed", True) else None, start_margin=start_margin_of(meta), rate=rate_of(meta))


__all__ = ["DL2Policy", "make_dl2"]
