"""Slurm's answers for a cluster of any size, in the shape Slurm 24.11 really prints them.

Every entry starts as a copy of an entry recorded from the test cluster (tests/fixtures/slurm/24.11:
`squeue --json`, `scontrol show nodes --json`), and only what differs between jobs and nodes is
changed: ids, names, states, GRES, CPUs and memory, node lists (with one `job_resources` allocation
per node, as Slurm lists them), times and comments. The tags and records in the comments are made
with slurm_liquid.ledger, the codecs the daemon reads them with.

The cluster: leaf switches of 32 nodes under spines of 16 leaves under one core switch (a
topology.conf and the `scontrol show topology` text that matches it); leaves alternate between
8 x h100 nodes and 4 x a100 nodes, each with 4 shards per GPU. About one node in a hundred is drained.

The jobs (of `jobs` in all):
- a quarter held by slurm-liquid (pending on their hold lease, AdminComment `state=held`, the record
  cli_filter wrote in the Comment); a few of them are GPU shares, a few ask by `--comment` only, a few
  have waited past `max_hold_s`;
- a tenth elastic and running where the daemon placed them (AdminComment `state=placed` with a
  `TrustedSpec` elastic range);
- the rest ordinary Slurm jobs: running where they fit (about four in five of the cluster's GPUs end
  up busy), pending for resources or priority, a few held by their users; and a few jobs the daemon
  placed a moment ago that Slurm has not started yet.

    python benchmarks/scale/generate.py --nodes 256 --jobs 1000 --out /tmp/scale   # writes the files
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import hostlist  # noqa: E402

from slurm_liquid.ledger import Record, Tag, TagState, TrustedSpec  # noqa: E402
from slurm_liquid.ledger.placed import format_placed  # noqa: E402
from slurm_liquid.ledger.tag import spec_digest  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "slurm" / "24.11"
NOW = 1_796_300_000              # the benchmark's clock (a little after the fixtures were recorded)
LEAF_NODES = 32
LEAVES_PER_SPINE = 16
SHARDS_PER_GPU = 4
# (gpu type, GPUs, CPUs, MiB) of the two kinds of node, alternating by leaf
HARDWARE = (("h100", 8, 64, 1_024_000), ("a100", 4, 32, 512_000))
SIZES = (1, 1, 1, 2, 2, 4, 4, 8, 16)           # GPUs a job asks for, drawn uniformly from this
MODELS = ("resnet50", "bert-base", "resnet18", "yolov3", "gpt2", "vit-b16")


def _num(value: Any) -> dict:
    return {"set": True, "infinite": False, "number": value}


_UNSET = {"set": False, "infinite": False, "number": 0}


@dataclass
class Scenario:
    """One cluster's answers: the JSON documents and the texts the CLI backend reads."""

    nodes: int
    jobs: int
    seed: int
    squeue: dict
    scontrol_nodes: dict
    topology_conf: str
    scontrol_topology: str
    partitions: str
    version: str
    kinds: dict[int, str] = field(default_factory=dict)   # job id -> held / elastic / placed / running / pending

    @cached_property
    def squeue_text(self) -> str:
        return json.dumps(self.squeue)

    @cached_property
    def nodes_text(self) -> str:
        return json.dumps(self.scontrol_nodes)

    def write(self, out: Path) -> None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "squeue.json").write_text(self.squeue_text)
        (out / "scontrol_nodes.json").write_text(self.nodes_text)
        (out / "topology.conf").write_text(self.topology_conf)
        (out / "topology.txt").write_text(self.scontrol_topology)
        (out / "partitions.txt").write_text(self.partitions)
        (out / "version.txt").write_text(self.version)


def _templates() -> tuple[dict, dict[str, dict], dict]:
    squeue = json.loads((FIXTURES / "squeue.json").read_text())
    by_id = {j["job_id"]: j for j in squeue["jobs"]}
    jobs = {"running": by_id[3], "held": by_id[7], "pending": by_id[8]}
    nodes = json.loads((FIXTURES / "scontrol_nodes.json").read_text())
    return squeue, jobs, nodes


def _hostlist(prefix: str, first: int, last: int, width: int) -> str:
    return f"{prefix}[{first:0{width}d}-{last:0{width}d}]" if last > first else f"{prefix}{first:0{width}d}"


class _Cluster:
    """Nodes, their hardware and what the generated running jobs took of them."""

    def __init__(self, count: int):
        self.count = count
        self.width = max(4, len(str(count)))
        self.names = [f"gpu{i:0{self.width}d}" for i in range(1, count + 1)]
        self.kind = [HARDWARE[(i // LEAF_NODES) % 2] for i in range(count)]
        self.gpus_free = [k[1] for k in self.kind]
        self.cpus_alloc = [0] * count
        self.mem_alloc = [0] * count
        self.shards_alloc = [0] * count
        self.drained = set()

    def leaves(self) -> list[tuple[int, int]]:
        return [(lo, min(lo + LEAF_NODES, self.count)) for lo in range(0, self.count, LEAF_NODES)]

    def take(self, i: int, gpus: int, cpus: int, mem: int, shards: int = 0) -> None:
        self.gpus_free[i] -= gpus
        self.cpus_alloc[i] += cpus
        self.mem_alloc[i] += mem
        self.shards_alloc[i] += shards


def generate(nodes: int, jobs: int, seed: int = 0) -> Scenario:
    """The answers of a cluster of `nodes` nodes running and queueing `jobs` jobs."""
    if nodes < LEAF_NODES or jobs < 20:
        raise ValueError(f"at least {LEAF_NODES} nodes and 20 jobs, got {nodes} and {jobs}")
    rng = random.Random(seed)
    squeue_template, job_templates, nodes_template = _templates()
    cluster = _Cluster(nodes)
    for i in rng.sample(range(nodes), max(nodes // 100, 1)):
        cluster.drained.add(i)

    kinds = (["held"] * (jobs // 4) + ["elastic"] * (jobs // 10) + ["placed"] * (jobs // 100))
    kinds += ["ordinary"] * (jobs - len(kinds))
    rng.shuffle(kinds)
    entries, labels = [], {}
    busy_target = 0.8 * sum(k[1] for k in cluster.kind)
    busy = 0
    for n, kind in enumerate(kinds):
        job_id = 10_000 + n
        entry, label, took = _job(job_id, kind, rng, cluster, job_templates, busy < busy_target)
        busy += took
        entries.append(entry)
        labels[job_id] = label
    squeue = dict(squeue_template, jobs=entries, last_backfill=_num(NOW - 20), last_update=_num(NOW - 1))
    node_entries = [_node(i, cluster, nodes_template["nodes"][0]) for i in range(nodes)]
    scontrol_nodes = dict(nodes_template, nodes=node_entries, last_update=_num(NOW - 1))
    conf, shown = _topology(cluster)
    partitions = (FIXTURES / "partitions.txt").read_text().replace(
        "Nodes=gpu[01-04]", f"Nodes={_hostlist('gpu', 1, nodes, cluster.width)}")
    return Scenario(nodes, jobs, seed, squeue, scontrol_nodes, conf, shown, partitions,
                    (FIXTURES / "version.txt").read_text(), labels)


def _topology(cluster: _Cluster) -> tuple[str, str]:
    """topology.conf and `scontrol show topology` for leaves of 32 under spines of 16 leaves."""
    conf, shown = [], []
    leaves = cluster.leaves()
    spines = [leaves[s:s + LEAVES_PER_SPINE] for s in range(0, len(leaves), LEAVES_PER_SPINE)]
    w = cluster.width
    leaf_id = 0
    for s, group in enumerate(spines, start=1):
        first_leaf = leaf_id + 1
        for lo, hi in group:
            leaf_id += 1
            nodes = _hostlist("gpu", lo + 1, hi, w)
            conf.append(f"SwitchName=leaf{leaf_id} Nodes={nodes} LinkSpeed=200")
            shown.append(f"SwitchName=leaf{leaf_id} Level=0 LinkSpeed=200 Nodes={nodes}")
        below = _hostlist("gpu", group[0][0] + 1, group[-1][1], w)
        leaves_of = f"leaf[{first_leaf}-{leaf_id}]" if leaf_id > first_leaf else f"leaf{leaf_id}"
        conf.append(f"SwitchName=spine{s} Switches={leaves_of} LinkSpeed=400")
        shown.append(f"SwitchName=spine{s} Level=1 LinkSpeed=400 Nodes={below} Switches={leaves_of}")
    everything = _hostlist("gpu", 1, cluster.count, w)
    spine_list = f"spine[1-{len(spines)}]" if len(spines) > 1 else "spine1"
    conf.append(f"SwitchName=core Switches={spine_list} LinkSpeed=800")
    shown.append(f"SwitchName=core Level=2 LinkSpeed=800 Nodes={everything} Switches={spine_list}")
    return "\n".join(conf) + "\n", "\n".join(shown) + "\n"


def _node(i: int, cluster: _Cluster, template: dict) -> dict:
    gpu_type, gpus, cpus, mem = cluster.kind[i]
    name = cluster.names[i]
    used = gpus - cluster.gpus_free[i]
    shards = gpus * SHARDS_PER_GPU
    per_gpu_shards = [0] * gpus
    left = cluster.shards_alloc[i]
    for g in range(gpus):                         # Slurm shows each device's shares: 'a/b' per GPU
        per_gpu_shards[g] = min(left, SHARDS_PER_GPU)
        left -= per_gpu_shards[g]
    if cluster.drained and i in cluster.drained:
        state = ["IDLE", "DRAIN"] if used == 0 else ["MIXED", "DRAIN"]
    else:
        state = ["IDLE"] if used == 0 and cluster.cpus_alloc[i] == 0 else (["ALLOCATED"] if cluster.gpus_free[i] == 0 else ["MIXED"])
    idx = f"IDX:0-{used - 1}" if used > 1 else ("IDX:0" if used == 1 else "IDX:N/A")
    node = copy.deepcopy(template)
    node.update(
        name=name, hostname=name, address=name, state=state, partitions=["gpu"],
        features=[gpu_type, "ib"] if gpu_type == "h100" else [gpu_type], active_features=[gpu_type, "ib"] if gpu_type == "h100" else [gpu_type],
        gres=f"gpu:{gpu_type}:{gpus},shard:{gpu_type}:{shards}",
        gres_used=f"gpu:{gpu_type}:{used}({idx}),shard:{gpu_type}:{cluster.shards_alloc[i]}("
                  + ",".join(f"{a}/{SHARDS_PER_GPU}" for a in per_gpu_shards) + ")",
        cpus=cpus, effective_cpus=cpus, sockets=2, cores=cpus // 2, real_memory=mem,
        alloc_cpus=cluster.cpus_alloc[i], alloc_idle_cpus=cpus - cluster.cpus_alloc[i],
        alloc_memory=cluster.mem_alloc[i], free_mem=_num(mem - cluster.mem_alloc[i]),
        tres=f"cpu={cpus},mem={mem}M,billing={cpus},gres/gpu={gpus},gres/shard={shards}",
        tres_used=f"cpu={cluster.cpus_alloc[i]},mem={cluster.mem_alloc[i]}M,gres/gpu={used}",
        reason="maintenance" if i in cluster.drained else "")
    return node


def _spec(rng: random.Random, gpus: int, elastic: bool) -> str:
    model = rng.choice(MODELS)
    words = [f"model={model}", f"batch-size={rng.choice((32, 64, 128, 256))}"]
    if elastic:
        words += [f"elastic={max(gpus // 2, 1)}:{gpus * 2}", "signal=USR1@60"]
    return " ".join(words)


def _request(rng: random.Random, cluster: _Cluster) -> tuple[int, int | None, str | None]:
    """(GPUs, GPUs per node or None for a per-job count, GPU type or None)."""
    gpus = rng.choice(SIZES)
    gpu_type = rng.choice(("h100", "a100", None))
    if gpus >= 8:
        per_node = 8 if gpu_type == "h100" else 4
        return gpus, per_node, gpu_type
    return gpus, None, gpu_type


def _place_running(rng: random.Random, cluster: _Cluster, gpus: int, per_node: int | None,
                   gpu_type: str | None, cpus_per_gpu: int, mem_per_gpu: int) -> list[int] | None:
    """Nodes for a running job: one node for small jobs, whole-ish nodes of one leaf for big ones."""
    def ok(i: int, want: int) -> bool:
        kind = cluster.kind[i]
        return (i not in cluster.drained and (gpu_type is None or kind[0] == gpu_type) and cluster.gpus_free[i] >= want
                and kind[2] - cluster.cpus_alloc[i] >= want * cpus_per_gpu and kind[3] - cluster.mem_alloc[i] >= want * mem_per_gpu)

    if per_node is None:
        for _ in range(24):
            i = rng.randrange(cluster.count)
            if ok(i, gpus):
                return [i]
        return None
    count = -(-gpus // per_node)
    leaves = cluster.leaves()
    for _ in range(8):
        lo, hi = leaves[rng.randrange(len(leaves))]
        chosen = [i for i in range(lo, hi) if ok(i, per_node)][:count]
        if len(chosen) == count:
            return chosen
    return None


def _job(job_id: int, kind: str, rng: random.Random, cluster: _Cluster, templates: dict[str, dict],
         fill: bool) -> tuple[dict, str, int]:
    """One squeue entry, its label, and the GPUs it took."""
    gpus, per_node, gpu_type = _request(rng, cluster)
    shards = 0
    if kind == "held" and rng.random() < 0.04:
        gpus, per_node, gpu_type, shards = 0, None, None, rng.choice((2, 4))
    cpus_per_gpu, mem_per_gpu = 4, 32_000
    label = kind
    nodes: list[int] | None = None
    if kind == "elastic" or (kind == "ordinary" and fill and rng.random() < 0.75):
        nodes = _place_running(rng, cluster, gpus, per_node, gpu_type, cpus_per_gpu, mem_per_gpu)
        label = "elastic" if kind == "elastic" and nodes else ("running" if nodes else "pending")
    elif kind == "ordinary":
        label = "pending"
    if kind == "elastic" and not nodes:
        label = "pending"
    running = nodes is not None
    template = templates["running" if running else ("held" if kind == "held" else "pending")]
    entry = copy.deepcopy(template)
    width = len(nodes) if nodes else (-(-gpus // per_node) if per_node else 1)
    on_node = per_node if per_node else gpus
    cpus = cpus_per_gpu * max(gpus, 1)
    mem_per_node = mem_per_gpu * max(on_node, 1)
    age = rng.uniform(5, 3600) if running else rng.uniform(1, 400)
    if kind == "held" and rng.random() < 0.02:
        age = rng.uniform(700, 2000)                # past max_hold_s: goes to Slurm's own scheduler
    submit = NOW - int(age) - (rng.randint(60, 7200) if running else 0)
    typed = f":{gpu_type}" if gpu_type else ""
    if shards:
        per_node_tres, per_job_tres, gres_req = f"gres/shard:{shards}", "", f"gres/shard={shards}"
    elif per_node:
        per_node_tres, per_job_tres, gres_req = f"gres/gpu{typed}:{per_node}", "", f"gres/gpu={gpus}"
    else:
        per_node_tres, per_job_tres, gres_req = "", f"gres/gpu{typed}:{gpus}", f"gres/gpu={gpus}"
    tres = f"cpu={cpus},mem={mem_per_node * width}M,node={width},billing={cpus},{gres_req}"
    entry.update(
        job_id=job_id, name=f"train{job_id}", user_name=f"user{job_id % 97:02d}", user_id=10_000 + job_id % 97,
        partition="gpu", features="", tres_per_node=per_node_tres, tres_per_job=per_job_tres, tres_req_str=tres,
        cpus=_num(cpus), node_count=_num(width), memory_per_node=_num(mem_per_node), memory_per_cpu=_UNSET,
        submit_time=_num(submit), time_limit=_num(rng.choice((60, 240, 1440))), required_nodes="",
        current_working_directory=f"/home/user{job_id % 97:02d}/run{job_id}", comment="", admin_comment="",
        standard_output=f"/home/user{job_id % 97:02d}/run{job_id}/slurm-{job_id}.out")
    took = 0
    if running:
        assert nodes is not None
        names = [cluster.names[i] for i in nodes]
        for i in nodes:
            cluster.take(i, on_node, cpus_per_gpu * on_node, mem_per_gpu * on_node)
        took = on_node * len(nodes)
        start = NOW - int(age)
        alloc = template["job_resources"]["nodes"]["allocation"][0]
        entry["job_resources"] = dict(template["job_resources"], nodes=dict(
            template["job_resources"]["nodes"], count=len(nodes), list=hostlist.collect_hostlist(names),
            allocation=[dict(copy.deepcopy(alloc), index=k, name=name, cpus={"count": cpus_per_gpu * on_node, "used": 0},
                             memory={"used": 0, "allocated": mem_per_gpu * on_node}) for k, name in enumerate(names)]),
            cpus=cpus)
        entry.update(job_state=["RUNNING"], state_reason="None", nodes=hostlist.collect_hostlist(names),
                     tres_alloc_str=tres, start_time=_num(start), eligible_time=_num(submit), batch_host=names[0],
                     gres_detail=[f"gpu:{cluster.kind[i][0]}:{on_node}(IDX:{_indices(cluster, i, on_node)})" for i in nodes],
                     hold=False, priority=_num(rng.randint(1, 50_000)),
                     end_time=_num(start + entry["time_limit"]["number"] * 60))
        if kind == "elastic":
            spec = _spec(rng, gpus, elastic=True)
            trusted = TrustedSpec(max(gpus // 2, 1), gpus * 2, "USR1", 60, spec.split()[0].split("=")[1],
                                  int(spec.split()[1].split("=")[1]), spec_digest(spec))
            placed = format_placed({n: on_node for n in names})
            tag = Tag(TagState.PLACED, placed=placed, at=start - 2, trusted=trusted)
            entry.update(admin_comment=tag.render(),
                         comment=Record({"mode": "adjust", "asked": f"gpu{typed}:{gpus}", "placed": placed},
                                        spec).render())
        return entry, label, took
    entry.update(job_state=["PENDING"], nodes="", tres_alloc_str="", start_time=_num(0), end_time=_num(0),
                 gres_detail=[], job_resources=None)
    if kind == "held":
        spec = _spec(rng, max(gpus, 1), elastic=rng.random() < 0.3)
        record = Record({"mode": "adjust", "est": f"{max(gpus, 1)}x{gpu_type or 'h100'}:31G",
                         "asked": f"gpu{typed}:{gpus}" if gpus else f"shard:{shards}"}, spec)
        comment = record.render()
        if rng.random() < 0.01:                   # opted in by --comment only: the daemon writes the record
            comment = f"liquid: {spec}"
        entry.update(state_reason="BeginTime", hold=False, priority=_num(rng.randint(1000, 50_000)),
                     eligible_time=_num(NOW + rng.randint(2, 60)), comment=comment,
                     admin_comment=Tag(TagState.HELD).render())
    elif kind == "placed":                       # placed by the daemon a moment ago, not started yet
        candidates = [i for i in range(cluster.count) if cluster.gpus_free[i] >= max(gpus, 1) and i not in cluster.drained]
        where = cluster.names[rng.choice(candidates)] if candidates and not per_node else None
        label = "placed" if where else "pending"
        if where:
            tag = Tag(TagState.PLACED, placed=format_placed({where: gpus}), at=NOW - rng.randint(1, 30),
                      trusted=TrustedSpec(digest=spec_digest("model=resnet50")))
            entry.update(admin_comment=tag.render(), required_nodes=where, node_count=_num(1),
                         comment=Record({"mode": "adjust", "placed": format_placed({where: gpus})},
                                        "model=resnet50").render())
        entry.update(state_reason="Resources" if where else "Priority", hold=False,
                     priority=_num(rng.randint(1, 50_000)), eligible_time=_num(NOW - 5))
    elif rng.random() < 0.05:
        entry.update(state_reason="JobHeldUser", hold=True, priority=_num(0), eligible_time=_num(0))
    else:
        entry.update(state_reason=rng.choice(("Resources", "Priority")), hold=False,
                     priority=_num(rng.randint(1, 50_000)), eligible_time=_num(submit))
    return entry, label, took


def _indices(cluster: _Cluster, i: int, count: int) -> str:
    """Device indices of the GPUs a job just took on node i (the last `count` taken)."""
    total = cluster.kind[i][1]
    last = total - cluster.gpus_free[i] - 1
    first = last - count + 1
    return f"{first}-{last}" if count > 1 else str(first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    scenario = generate(args.nodes, args.jobs, args.seed)
    scenario.write(args.out)
    counts: dict[str, int] = {}
    for label in scenario.kinds.values():
        counts[label] = counts.get(label, 0) + 1
    print(f"{args.out}: {args.nodes} nodes, {args.jobs} jobs {counts}, squeue {len(scenario.squeue_text) / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
