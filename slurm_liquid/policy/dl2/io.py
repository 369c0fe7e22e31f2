"""Policy files: a numpy .npz of the weights plus a JSON metadata string, never pickled.

Loading uses `allow_pickle=False`, so a file cannot run code; the zip container's CRCs
catch damaged bytes, and the metadata (format name, version, feature count, window, layer
sizes) is checked against the arrays, so a wrong or truncated file is one clear error.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from slurm_liquid.errors import UsageError
from slurm_liquid.policy.dl2.net import Params
from slurm_liquid.policy.dl2.state import FEATURES, RATE

FORMAT = "slurm-liquid-dl2-policy"
VERSION = 1
TRAINED_DIR = Path(__file__).parent / "trained"
SHIPPED = {30.0: TRAINED_DIR / "dl2-p30.npz", 150.0: TRAINED_DIR / "dl2-p150.npz"}
# trained under the daemon's rules (`loop.rules.Rules.daemon`) on live-replay workloads: the daemon's default
DAEMON_FILE = TRAINED_DIR / "dl2-daemon.npz"
META_KEY = "__meta__"


def save_policy(path: str | Path, params: Params, meta: dict[str, Any],
                extra: dict[str, np.ndarray] | None = None, features: int = FEATURES) -> Path:
    """Write atomically (temp file then rename), so an interrupted save never leaves half a file.
    `features`: the row width (the PS/worker policy of the paper replica has its own)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "format": FORMAT, "version": VERSION, "features": features}
    arrays = {k: np.asarray(v, dtype=float) for k, v in params.items()}
    arrays.update(extra or {})
    arrays[META_KEY] = np.array(json.dumps(meta, sort_keys=True))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        np.savez_compressed(fh, **arrays)
    os.replace(tmp, path)
    return path


def load_arrays(path: str | Path, features: int = FEATURES,
                action_space: str = "gpus") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and metadata of a policy file for `action_space` ("gpus": GPU counts; "ps-worker":
    the paper replica's), checked in that order: format, action space, version and row width."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"policy file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.array(data[k]) for k in data.files}
        meta = json.loads(str(arrays.pop(META_KEY)))
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError, json.JSONDecodeError) as exc:
        raise UsageError(f"policy file {path} is corrupted or not a DL2 policy file ({type(exc).__name__}: {exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UsageError(f"policy file {path} is not a DL2 policy file (format {meta.get('format') if isinstance(meta, dict) else None!r})")
    space = meta.get("action_space", "gpus")
    if space != action_space:
        if space == "ps-worker":
            raise UsageError(f"policy file {path} is a PS/worker DL2 policy (for the dl2-paper workloads), "
                             "not one that decides GPU counts")
        raise UsageError(f"policy file {path} is not a PS/worker DL2 policy (action space {space!r})")
    legacy = features == FEATURES and meta.get("features") == RATE  # written before the RATE column
    if meta.get("version") != VERSION or (meta.get("features") != features and not legacy):
        raise UsageError(f"policy file {path} has version {meta.get('version')} with {meta.get('features')} features; "
                         f"this slurm-liquid reads version {VERSION} with {features} here (retrain it, or use the "
                         "slurm-liquid that wrote it)")
    return arrays, meta


def load_policy(path: str | Path, features: int = FEATURES, action_space: str = "gpus") -> tuple[Params, dict[str, Any]]:
    """The network weights and metadata of a policy file, checked for consistent shapes."""
    arrays, meta = load_arrays(path, features, action_space)
    layers = int(meta.get("layers", 0))
    names = [f"{p}{i}" for i in range(layers) for p in "Wb"] + ["wp", "bp", "wv", "bv"]
    missing = [n for n in names if n not in arrays]
    if layers < 1 or missing:
        raise UsageError(f"policy file {path} lacks weights {', '.join(missing) or 'W0'}")
    params = {n: np.asarray(arrays[n], dtype=float) for n in names}
    if features == FEATURES and meta.get("features") == RATE and params["W0"].ndim == 2 and len(params["W0"]) == RATE:
        # a file from before the RATE column: a zero weight for it computes exactly what it was trained to
        params["W0"] = np.vstack([params["W0"], np.zeros((1, params["W0"].shape[1]))])
        meta = {**meta, "features": FEATURES}
    width = features
    for i in range(layers):
        w = params[f"W{i}"]
        if w.ndim != 2 or w.shape[0] != width or params[f"b{i}"].shape != (w.shape[1],):
            raise UsageError(f"policy file {path}: layer {i} has shape {w.shape}, expected ({width}, n)")
        width = w.shape[1]
    if params["wp"].shape != (width,) or params["wv"].shape != (width,):
        raise UsageError(f"policy file {path}: output heads do not match the last layer ({width} units)")
    if not all(np.isfinite(v).all() for v in params.values()):
        raise UsageError(f"policy file {path} holds non-finite weights")
    return params, meta


def shipped_for(restart_penalty: float, world: str = "reference") -> Path:
    """The shipped policy for `world`: under the daemon's rules the one trained under them
    (`DAEMON_FILE`), else the one trained for the restart penalty nearest to `restart_penalty`."""
    if world == "daemon" and DAEMON_FILE.is_file():
        return DAEMON_FILE
    available = {p: f for p, f in SHIPPED.items() if f.is_file()}
    if not available:
        raise UsageError(f"no trained DL2 policy is installed under {TRAINED_DIR}; give one with --policy-file")
    return available[min(available, key=lambda p: abs(p - restart_penalty))]
