"""DL2 policy files: round trip, clear errors for damaged or foreign files, and the CLIs using them."""

import json

import numpy as np
import pytest

from slurm_liquid.cli import main
from slurm_liquid.errors import UsageError
from slurm_liquid.policy import make_policy
from slurm_liquid.policy.dl2.io import load_policy, save_policy
from slurm_liquid.policy.dl2.train import new_params


@pytest.fixture()
def policy_file(tmp_path):
    params = new_params(8, 2, seed=4)
    return save_policy(tmp_path / "p.npz", params, {"window": 32, "layers": 2, "hidden": 8, "seed": 4,
                                                    "restart_penalty": 30.0, "training": {"workloads": "test"}}), params


def test_round_trip_keeps_weights_and_metadata(policy_file):
    path, params = policy_file
    loaded, meta = load_policy(path)
    assert all(np.array_equal(loaded[k], params[k]) for k in params)
    assert meta["seed"] == 4 and meta["restart_penalty"] == 30.0 and meta["version"] == 1
    assert meta["training"] == {"workloads": "test"}


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_a_corrupted_file_gives_one_clear_error(policy_file, damage):
    path, _ = policy_file
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 3] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "garbage":
        data = bytearray(b"not a policy at all\n" * 10)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="policy file .*p.npz"):
        load_policy(path)


def test_foreign_npz_and_wrong_shapes_are_refused(tmp_path):
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(UsageError, match="corrupted or not a DL2 policy"):
        load_policy(tmp_path / "other.npz")
    params = new_params(8, 2, seed=0)
    params["W1"] = np.zeros((5, 8))
    save_policy(tmp_path / "bad.npz", params, {"window": 32, "layers": 2})
    with pytest.raises(UsageError, match="layer 1"):
        load_policy(tmp_path / "bad.npz")
    with pytest.raises(UsageError, match="does not exist"):
        load_policy(tmp_path / "missing.npz")


def test_simulate_cli_runs_dl2_from_a_policy_file(policy_file, tmp_path, capsys):
    path, _ = policy_file
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\nb,60,ncf,1,256\n")
    assert main(["simulate", "--workload", str(csv), "--nodes", "2", "--policy", "dl2,drf",
                 "--policy-file", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["policy"] for o in out] == ["dl2", "drf"]
    assert out[0]["jobs"] == 2


def test_simulate_cli_reports_a_corrupted_policy_file(policy_file, tmp_path, capsys):
    path, _ = policy_file
    path.write_bytes(b"junk")
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n")
    assert main(["simulate", "--workload", str(csv), "--policy", "dl2", "--policy-file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "corrupted" in err and "Traceback" not in err


def test_make_policy_knows_dl2(policy_file):
    path, _ = policy_file
    assert make_policy("dl2", policy_file=str(path)).name == "dl2"


def test_policy_info_prints_metadata(policy_file, capsys):
    path, _ = policy_file
    assert main(["policy", "info", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["format"] == "slurm-liquid-dl2-policy"


def test_export_turns_a_checkpoint_into_a_policy_file(tmp_path, capsys):
    params = new_params(8, 2, seed=1)
    best = new_params(8, 2, seed=2)
    save_policy(tmp_path / "c.npz", params, {"window": 32, "layers": 2, "episode": 3, "curve": [{"episode": 3}],
                                              "policy_meta": {"window": 32, "layers": 2, "stages": ["warm"]},
                                              "best": [100.0, 2]},
                extra={f"best_{k}": v for k, v in best.items()})
    assert main(["policy", "export", str(tmp_path / "c.npz"), "--out", str(tmp_path / "p.npz"),
                 "--curves", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run-rl.csv").read_text().splitlines()[1] == "3"  # the checkpoint's curve
    loaded, meta = load_policy(tmp_path / "p.npz")
    assert np.array_equal(loaded["W0"], best["W0"]) and "kept episode 2" in meta["stages"][-1]
    assert main(["policy", "export", str(tmp_path / "p.npz"), "--out", str(tmp_path / "q.npz")]) == 2


def test_window_order_is_read_from_the_file_and_older_files_keep_arrival_order(tmp_path):
    params = new_params(8, 2, seed=4)
    old = save_policy(tmp_path / "old.npz", params, {"window": 32, "layers": 2})
    new = save_policy(tmp_path / "new.npz", params, {"window": 32, "layers": 2, "window_order": "service"})
    assert make_policy("dl2", policy_file=str(old)).order == "arrival"
    assert make_policy("dl2", policy_file=str(new)).order == "service"
    odd = save_policy(tmp_path / "odd.npz", params, {"window": 32, "layers": 2, "window_order": "random"})
    with pytest.raises(UsageError, match="window_order 'random'"):
        make_policy("dl2", policy_file=str(odd))


@pytest.mark.parametrize("flag", ["--window", "--validation-workloads", "--validation-jobs", "--jobs", "--episodes"])
def test_train_refuses_counts_below_one(tmp_path, capsys, flag):
    from slurm_liquid.cli import main

    assert main(["policy", "train", "--rl", "--out", str(tmp_path / "p.npz"), flag, "0"]) == 2
    err = capsys.readouterr().err
    assert f"{flag} must be at least 1, not 0" in err
    assert not (tmp_path / "p.npz").exists()


def test_train_with_batch_scaling_records_it(tmp_path):
    from slurm_liquid.cli import main

    out = tmp_path / "bs.npz"
    assert main(["policy", "train", "--supervised", "--batch-scaling", "--out", str(out), "--jobs", "12",
                 "--warmup-workloads", "1", "--warmup-epochs", "1", "--hidden", "8"]) == 0
    assert load_policy(out)[1]["batch_scaling"] is True
