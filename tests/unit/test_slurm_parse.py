"""JSON normalisation against outputs recorded from real Slurm 22.05, 24.11 and 26.05 (tests/fixtures/slurm/).

Every version must give the same typed answer for the same scenario; capture.py beside the
fixtures replays that scenario on a fresh cluster.
"""

from __future__ import annotations

import json
from datetime import timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_liquid.slurm import CliBackend, SlurmError, SlurmVersion, parse
from slurm_liquid.topology import Topology
from tests.unit.recorded import FIXTURES, VERSIONS, RecordedRunner


def test_fixtures_cover_every_shipped_major_version() -> None:
    assert {"22.05", "24.11", "26.05"} <= set(VERSIONS)


class Recorded:
    def __init__(self, version: str):
        self.dir = FIXTURES / version
        self.manifest = json.loads((self.dir / "manifest.json").read_text())
        self.roles = self.manifest["jobs"]

    def doc(self, name: str) -> dict:
        return json.loads((self.dir / name).read_text())

    def squeue(self) -> dict[str, parse.Job]:
        by_id = {j.job_id: j for j in parse.jobs_from_document(self.doc("squeue.json"), "squeue")}
        return {role: by_id[i] for role, i in self.roles.items() if i in by_id}

    def sacct(self) -> dict[str, parse.Job]:
        """Through the backend: on 22.05 it completes the JSON's exit codes from sacct's text."""
        by_id = {j.job_id: j for j in CliBackend(RecordedRunner(self.dir.name)).accounting()}
        return {role: by_id[i] for role, i in self.roles.items() if i in by_id}

    def nodes(self) -> dict[str, parse.Node]:
        name = "scontrol_nodes.json" if (self.dir / "scontrol_nodes.json").exists() else "sinfo.json"
        return {n.name: n for n in parse.nodes_from_document(self.doc(name), name)}


@pytest.fixture(params=VERSIONS)
def recorded(request: pytest.FixtureRequest) -> Recorded:
    return Recorded(request.param)


def test_version_in_meta_and_in_scontrol_agree(recorded: Recorded) -> None:
    from_meta = parse.document_version(recorded.doc("squeue.json"))
    from_cli = SlurmVersion.parse((recorded.dir / "version.txt").read_text())
    assert from_meta == from_cli == SlurmVersion.parse(recorded.manifest["slurm"])


def test_live_jobs(recorded: Recorded) -> None:
    jobs = recorded.squeue()
    multi = jobs["running_multinode"]
    assert (multi.state, multi.user, multi.nodes, multi.num_nodes) == ("RUNNING", "root", ("gpu01", "gpu02"), 2)
    assert (multi.gpus, multi.gpus_per_node, multi.gpu_type) == (8, 4, "h100")
    assert multi.time_limit_s == 30 * 60 and multi.end_time is None and multi.exit_code is None
    assert multi.start_time is not None and multi.start_time.tzinfo == timezone.utc

    shard = jobs["shard"]
    assert shard.is_running and shard.shards == 4 and shard.gpus == 0

    alice = jobs["other_user"]
    assert (alice.user, alice.gpus, alice.mem_mib) == ("alice", 1, 2048)

    requeued = jobs["requeued_held"]
    assert requeued.is_pending and requeued.held and requeued.restarts == 1

    held = jobs["held"]
    assert held.is_pending and held.held and held.reason == "JobHeldUser" and held.comment == "liquid:v1 held"
    assert held.priority == 0 and held.nodes == ()

    waiting = jobs["pending_resources"]
    assert waiting.is_pending and not waiting.held and waiting.reason in {"Resources", "Priority"}
    assert (waiting.gpus, waiting.gpus_per_node, waiting.num_nodes) == (12, 4, 3)


def test_accounting_jobs(recorded: Recorded) -> None:
    jobs = recorded.sacct()
    done = jobs["completed"]
    assert (done.state, done.exit_code, done.gpus, done.comment) == ("COMPLETED", 0, 2, "liquid:v1 model=resnet50")
    assert done.source == "sacct" and done.is_finished and len(done.nodes) == 1
    assert done.submit_time <= done.start_time <= done.end_time

    failed = jobs["failed"]
    assert (failed.state, failed.exit_code, failed.gpus) == ("FAILED", 3, 1)

    multi = jobs["running_multinode"]
    assert multi.is_running and multi.gpus == 8 and multi.nodes == ("gpu01", "gpu02") and multi.end_time is None

    assert jobs["other_user"].user == "alice"
    assert jobs["shard"].shards == 4
    assert jobs["pending_resources"].nodes == ()  # sacct says "None assigned"
    requeued = jobs["requeued_held"]  # 22.05 says REQUEUED, 24.11 [PENDING, REQUEUED]
    assert requeued.state == "PENDING" and requeued.state_flags == ("REQUEUED",)


def test_nodes(recorded: Recorded) -> None:
    nodes = recorded.nodes()
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03", "gpu04"]
    for node in nodes.values():
        assert (node.gpus, node.gpu_type, node.shards, node.cpus, node.mem_mib) == (4, "h100", 16, 8, 16000)
        assert node.partitions == ("gpu",)
    assert nodes["gpu01"].gpus_alloc == nodes["gpu02"].gpus_alloc == 4
    assert nodes["gpu01"].state in {"ALLOCATED", "MIXED"} and nodes["gpu01"].gpus_free == 0
    drained = nodes["gpu04"]
    assert "DRAIN" in drained.state_flags and drained.reason == "maintenance"
    assert not drained.available and drained.gpus_free == 0
    assert nodes["gpu03"].cpus_alloc >= 2 and nodes["gpu03"].mem_alloc_mib >= 2048


def test_partitions_and_topology(recorded: Recorded) -> None:
    lines = (recorded.dir / "partitions.txt").read_text().splitlines()
    [gpu] = [parse.partition_from_oneliner(line) for line in lines if line.strip()]
    assert (gpu.name, gpu.state, gpu.is_default, gpu.max_time_s, gpu.total_gpus) == ("gpu", "UP", True, None, 16)
    assert gpu.nodes == ("gpu01", "gpu02", "gpu03", "gpu04")
    topology = Topology.from_scontrol((recorded.dir / "topology.txt").read_text())
    assert [topology.leaf_of(n) for n in gpu.nodes] == ["leaf1", "leaf1", "leaf2", "leaf2"]


# ------------------------------------------------------------------ the pieces, one shape at a time

@pytest.mark.parametrize("value, expected", [
    (5, 5), ({"set": True, "infinite": False, "number": 7}, 7), ({"set": False, "infinite": False, "number": 0}, None),
    ({"set": True, "infinite": True, "number": 0}, None), (None, None), ("12", 12), ("x", None), (True, None),
])
def test_num_reads_plain_and_structured_numbers(value, expected) -> None:
    assert parse.num(value) == expected


@pytest.mark.parametrize("value, expected", [
    ("idle", ("IDLE", ())), ("IDLE+DRAIN", ("IDLE", ("DRAIN",))), (["MIXED", "DRAIN"], ("MIXED", ("DRAIN",))),
    (["DRAIN", "IDLE"], ("IDLE", ("DRAIN",))), ([], ("UNKNOWN", ())),
])
def test_node_states(value, expected) -> None:
    assert parse.states(value, parse.BASE_NODE_STATES) == expected


@pytest.mark.parametrize("spec, expected", [
    ("gres/gpu:2", [("gpu", None, 2)]),                      # 24.11 TresPerNode
    ("gres:gpu:2", [("gpu", None, 2)]),                      # 22.05 TresPerNode
    ("gres/gpu:h100:4", [("gpu", "h100", 4)]),
    ("gpu:h100:3(IDX:0-2),shard:h100:0(0/4,0/4,0/4,0/4)", [("gpu", "h100", 3), ("shard", "h100", 0)]),
    ("gpu:h100:4(S:0-1),shard:h100:16(S:0-1)", [("gpu", "h100", 4), ("shard", "h100", 16)]),
    ("gpu", [("gpu", None, 1)]), ("", []), ("(null)", []),
])
def test_gres_specs_of_every_version(spec, expected) -> None:
    assert parse.parse_gres(spec) == expected


def test_tres_string_and_list_agree() -> None:
    as_string = parse.parse_tres("cpu=2,mem=2G,node=1,billing=2,gres/gpu=3,gres/shard=4")
    as_list = parse.parse_tres([
        {"type": "cpu", "name": "", "count": 2}, {"type": "mem", "name": None, "count": 2048},
        {"type": "node", "name": "", "count": 1}, {"type": "billing", "name": "", "count": 2},
        {"type": "gres", "name": "gpu", "count": 3}, {"type": "gres", "name": "shard", "count": 4},
        {"type": "energy", "name": "", "count": -2}])
    assert as_string == as_list
    assert parse.tres_gpus(parse.parse_tres("gres/gpu:h100=2,gres/gpu:a100=1")) == 3


@pytest.mark.parametrize("value, seconds", [
    ("UNLIMITED", None), ("30", 1800), ("1:00:00", 3600), ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),
    ("10:30", 630),
])
def test_durations(value, seconds) -> None:
    assert parse._duration_s(value) == seconds


def test_exit_codes_from_sacct_text() -> None:
    assert parse.exit_codes_from_sacct_text("1|0:0\n2|3:0\n3|0:9\n4.batch|1:0\n") == {1: 0, 2: 3, 3: 137}


@pytest.mark.parametrize("raw, code", [(0, 0), (768, 3), (9, 137), ({"return_code": {"set": True, "number": 3}}, 3)])
def test_squeue_exit_codes_of_every_version(raw, code) -> None:
    assert parse._exit_code(raw) == code


def test_accounting_placeholders_are_not_reported_yet(recorded: Recorded) -> None:
    """slurmdbd's placeholder for a job whose step arrived first: no partition, name 'allocation'."""
    doc = recorded.doc("sacct.json")
    real = doc["jobs"][0]
    placeholder = dict(real, job_id=99, name="allocation", partition="")
    jobs = parse.jobs_from_document(dict(doc, jobs=[real, placeholder]), "sacct")
    assert [j.job_id for j in jobs] == [real["job_id"]]


def test_errors_in_a_reply_become_one_message() -> None:
    doc = {"errors": [{"description": "Invalid job id", "error_number": 2017}], "jobs": []}
    with pytest.raises(SlurmError, match="squeue reported: Invalid job id"):
        parse.jobs_from_document(doc, "squeue")


gres_item = st.tuples(
    st.sampled_from(["gpu", "shard", "mps"]),
    st.one_of(st.none(), st.sampled_from(["h100", "a100", "l40s"])),
    st.integers(0, 64),
    st.one_of(st.none(), st.lists(st.integers(0, 7), min_size=1, max_size=4)),
)


@given(st.lists(gres_item, max_size=5))
def test_gres_lists_with_index_details_split_right(items) -> None:
    """Commas inside '(...)' never split an item, whatever the detail holds."""
    def render(name, gtype, count, detail):
        body = ":".join([name, *([gtype] if gtype else []), str(count)])
        return body + (f"({','.join(f'{d}/4' for d in detail)})" if detail else "")

    spec = ",".join(render(*item) for item in items)
    assert parse.parse_gres(spec) == [(n, t, c) for n, t, c, _ in items]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_requeued_job_is_one_record_of_its_latest_run_with_its_restarts(version: str) -> None:
    recorded = Recorded(version)
    doc = recorded.doc("sacct.json")
    completed = next(r for r in doc["jobs"] if r["job_id"] == recorded.roles["completed"])
    # slurmdbd keeps one record per run, oldest first: two earlier runs ended REQUEUED.
    earlier = json.loads(json.dumps(completed))
    earlier["state"]["current"] = ["REQUEUED"] if isinstance(earlier["state"]["current"], list) else "REQUEUED"
    doc = dict(doc, jobs=[earlier, json.loads(json.dumps(earlier)), *doc["jobs"]])
    jobs = [j for j in parse.jobs_from_document(doc, "sacct") if j.job_id == completed["job_id"]]
    assert len(jobs) == 1 and jobs[0].state == "COMPLETED" and jobs[0].restarts == 2


# ------------------------------------------------------------------ any input: skip the entry or SlurmError

def _number(version: str, value):
    """`value` as this version prints numbers: plain (22.05) or {set, infinite, number}."""
    return value if version.startswith("22.") else {"set": True, "infinite": False, "number": value}


def test_a_far_future_begin_time_stays_in_the_future(recorded: Recorded) -> None:
    """--begin=uts99999999999999 made squeue's parser raise ValueError (year out of range) every pass."""
    doc = recorded.doc("squeue.json")
    waiting = recorded.roles["pending_resources"]
    for raw in doc["jobs"]:
        if raw["job_id"] == waiting:
            raw["eligible_time"] = _number(recorded.dir.name, 99999999999999)
            raw["submit_time"] = _number(recorded.dir.name, 99999999999999)
    jobs = {j.job_id: j for j in parse.jobs_from_document(doc, "squeue")}
    assert jobs[waiting].eligible_time == parse.FAR_FUTURE      # "not yet", never "no begin time"
    assert jobs[waiting].submit_time is None                   # a past event that cannot be: unknown
    assert len(jobs) == len(doc["jobs"])


BREAKAGES = [
    # (field, value, skipped?) -- what a user, a newer Slurm or a corrupted reply can put there
    ("job_id", "x", True), ("job_id", -4, True), ("node_count", -3, True), ("cpus", 10 ** 400, True),
    ("tres_req_str", "cpu=1,gres/gpu=" + "9" * 400, True), ("tres_alloc_str", "gres/gpu=" + "9" * 400, True),
    ("nodes", "gpu[1-", True), ("nodes", "gpu[1-99999],cpu[1-99999]", True), ("job_state", 5, True),
    ("name", {"a": 1}, True), ("tres_per_node", "gres/gpu:" + "9" * 30, True),
    ("submit_time", float("nan"), False), ("start_time", float("inf"), False), ("start_time", -5, False),
    ("priority", float("nan"), False), ("time_limit", 10 ** 400, False), ("restart_cnt", None, False),
]


def _break_one(recorded: Recorded, name: str, read, role: str, field: str, value):
    """Read the recorded answer clean and with one field of the job of `role` set to `value`:
    (clean, broken, reasons of what was skipped, the job id)."""
    doc = recorded.doc(name)
    clean = read(doc, [])
    victim = recorded.roles[role]
    for raw in doc["jobs"]:
        if raw["job_id"] == victim:
            raw[field] = value
    reasons: list[str] = []
    broken = read(doc, reasons)
    assert [j for j in broken if j.job_id != victim] == [j for j in clean if j.job_id != victim]
    return clean, broken, reasons, victim


@pytest.mark.parametrize("field, value, skipped", BREAKAGES)
def test_one_unreadable_job_never_hides_the_others(recorded: Recorded, field, value, skipped) -> None:
    clean, jobs, reasons, _ = _break_one(recorded, "squeue.json", lambda doc, why: parse.jobs_from_document(
        doc, "squeue", why), "running_multinode", field, value)
    if skipped:
        assert len(jobs) == len(clean) - 1 and len(reasons) == 1 and "skipped job" in reasons[0]
    else:
        assert len(jobs) == len(clean) and reasons == []


@pytest.mark.parametrize("field, value", [("state", 7), ("tres", []), ("time", {"submission": 1e400}),
                                          ("nodes", "gpu[9-1]"), ("allocation_nodes", -1), ("job_id", None)])
def test_one_unreadable_accounting_record_never_hides_the_others(recorded: Recorded, field, value) -> None:
    _, runs, reasons, victim = _break_one(recorded, "sacct.json", lambda doc, why: parse.runs_from_document(
        doc, "sacct", why), "completed", field, value)
    assert reasons or any(j.job_id == victim for j in runs)


@pytest.mark.parametrize("field, value", [("name", ""), ("cpus", -8), ("gres", "gpu:h100:" + "9" * 30),
                                          ("state", {"x": 1}), ("partitions", [["gpu"]]), ("real_memory", 2 ** 70)])
def test_one_unreadable_node_never_hides_the_others(recorded: Recorded, field, value) -> None:
    name = "scontrol_nodes.json" if (recorded.dir / "scontrol_nodes.json").exists() else "sinfo.json"
    doc = recorded.doc(name)
    doc["nodes"][0][field] = value
    reasons: list[str] = []
    nodes = parse.nodes_from_document(doc, name, reasons)
    assert [n.name for n in nodes] == ["gpu02", "gpu03", "gpu04"] and len(reasons) == 1


@pytest.mark.parametrize("entry", [None, 5, "job", [], [{"job_id": 1}]])
def test_an_entry_that_is_no_object_is_skipped(entry) -> None:
    reasons: list[str] = []
    assert parse.jobs_from_document({"jobs": [entry]}, "squeue", reasons) == [] and "not an object" in reasons[0]


_READERS = {"squeue": lambda doc: parse.jobs_from_document(doc, "squeue"),
            "sacct": lambda doc: parse.jobs_from_document(doc, "sacct"),
            "nodes": lambda doc: parse.nodes_from_document(doc, "sinfo")}


@pytest.mark.parametrize("doc, readers", [
    ([], "squeue sacct nodes"), (None, "squeue sacct nodes"), ("jobs", "squeue sacct nodes"), (5, "squeue sacct nodes"),
    ({"errors": 7}, "squeue sacct nodes"), ({"errors": "boom", "jobs": []}, "squeue sacct nodes"),
    ({"jobs": 5}, "squeue sacct"), ({"jobs": {"1": {}}}, "squeue sacct"), ({"nodes": "gpu01"}, "nodes"),
])
def test_a_document_that_is_no_slurm_answer_is_a_slurm_error(doc, readers: str) -> None:
    for reader in readers.split():
        with pytest.raises(SlurmError):
            _READERS[reader](doc)


@pytest.mark.parametrize("out, message", [
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"), ('{"jobs": [' + "9" * 5000 + "]}", "cannot be read"),
    ("[]", "not an object"), ("", "not valid JSON"), ('{"jobs": []', "not valid JSON"),
])
def test_output_that_is_no_json_object_is_a_slurm_error(out: str, message: str) -> None:
    with pytest.raises(SlurmError, match=message):
        CliBackend(lambda argv, timeout, stdin=None: out).jobs()


def test_numbers_that_are_not_finite_read_as_unset() -> None:
    for value in (float("nan"), float("inf"), {"set": True, "infinite": False, "number": float("-inf")}, "9" * 400):
        assert parse.num(value) is None and parse.integer(value, 7) == 7
    assert parse.timestamp(float("nan")) is None and parse.timestamp(-5) is None
    assert parse.timestamp(10 ** 400) is None and parse.timestamp(10 ** 400, beyond=parse.FAR_FUTURE) == parse.FAR_FUTURE


def test_fields_the_placement_filters_read(recorded: Recorded) -> None:
    """Partition, CPUs, memory per node, features of jobs; partitions, features, CPUs, memory of nodes."""
    version = recorded.dir.name
    doc = recorded.doc("squeue.json")
    multi_id = recorded.roles["running_multinode"]
    for raw in doc["jobs"]:
        if raw["job_id"] == multi_id:
            raw["features"] = "h100&ib"
    jobs = {j.job_id: j for j in parse.jobs_from_document(doc, "squeue")}
    multi = jobs[multi_id]
    # 2 CPUs and 2,000 MiB (--mem-per-cpu 1000) on 2 nodes: 1 CPU and 1,000 MiB on each
    assert (multi.partition, multi.cpus, multi.cpus_per_node, multi.mem_mib) == ("gpu", 2, 1, 1000)
    assert multi.features == "h100&ib" and multi.gpu_type == "h100"
    assert jobs[recorded.roles["other_user"]].mem_mib == 2048   # --mem 2G on one node
    waiting = jobs[recorded.roles["pending_resources"]]
    assert (waiting.num_nodes, waiting.cpus_per_node, waiting.mem_mib) == (3, 1, 1000)

    sacct = recorded.doc("sacct.json")
    for raw in sacct["jobs"]:
        raw["constraints"] = "a100|h100"
    runs = {j.job_id: j for j in parse.runs_from_document(sacct)}
    assert runs[multi_id].features == "a100|h100" and runs[multi_id].mem_mib == 1000

    name = "sinfo.json" if version.startswith("22.") else "scontrol_nodes.json"
    nodes_doc = recorded.doc(name)
    # 22.05's sinfo prints features as one comma-separated string, 24.11+ as lists
    nodes_doc["nodes"][0]["active_features"] = "h100,ib" if version.startswith("22.") else ["h100", "ib"]
    nodes_doc["nodes"][1]["features"] = "nvlink" if version.startswith("22.") else ["nvlink"]
    nodes = {n.name: n for n in parse.nodes_from_document(nodes_doc, name)}
    assert nodes["gpu01"].features == ("h100", "ib") and nodes["gpu02"].features == ("nvlink",)
    assert nodes["gpu03"].features == ()
    gpu03 = nodes["gpu03"]
    assert (gpu03.partitions, gpu03.cpus, gpu03.mem_mib, gpu03.gpu_type, gpu03.available) == (("gpu",), 8, 16000,
                                                                                              "h100", True)
    assert gpu03.cpus_alloc >= 2 and gpu03.mem_alloc_mib >= 2048 and gpu03.state in {"MIXED", "ALLOCATED"}


@pytest.mark.parametrize("text", ["", "   ", "slurm", "slurm ²³.1", "slurm x.y"])
def test_a_version_that_is_no_version_is_a_slurm_error(text: str) -> None:
    with pytest.raises(SlurmError, match="cannot read a Slurm version"):
        SlurmVersion.parse(text)


def test_partition_and_exit_code_lines_that_cannot_be_read_are_left_out(recorded: Recorded) -> None:
    good = (recorded.dir / "partitions.txt").read_text().strip()
    reasons: list[str] = []
    lines = [good.replace("PartitionName=gpu", "PartitionName=bad").replace("MaxTime=UNLIMITED", "MaxTime=1:x"),
             good, "Nodes=gpu[1-", good.replace("PartitionName=gpu", "PartitionName=huge") + " TRES=gres/gpu=" + "9" * 40]
    parts = parse.partitions_from_text("\n".join(lines), skipped=reasons)
    assert [p.name for p in parts] == ["gpu"] and len(reasons) == 3
    assert parse.exit_codes_from_sacct_text("1|²:0\n2|3:0\n3|" + "9" * 5000 + ":0\n4|0:9") == {2: 3, 4: 137}


# --- large answers: only the fields the readers read are decoded ---------------------------------

class _Reading(dict):
    """A job or node entry that remembers every key read from it."""

    read: set[str] = set()

    def get(self, key, default=None):
        _Reading.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key):
        _Reading.read.add(key)
        return super().__getitem__(key)


def test_the_fast_reader_keeps_every_field_the_readers_read(recorded: Recorded) -> None:
    """SQUEUE_FIELDS / NODE_FIELDS name all that job_from_squeue / node_from_json read: a field read
    but not kept would read as unset on the fast path, silently."""
    nodes = "scontrol_nodes.json" if (recorded.dir / "scontrol_nodes.json").exists() else "sinfo.json"
    for name, read, fields in (("squeue.json", parse.job_from_squeue, parse.SQUEUE_FIELDS),
                               (nodes, parse.node_from_json, parse.NODE_FIELDS)):
        _Reading.read = set()
        key = "jobs" if name == "squeue.json" else "nodes"
        for raw in recorded.doc(name)[key]:
            read(_Reading(raw))
        assert _Reading.read and _Reading.read <= set(fields), sorted(_Reading.read - set(fields))


def test_the_fast_reader_reads_what_the_full_reader_reads(recorded: Recorded) -> None:
    text = (recorded.dir / "squeue.json").read_text()
    assert parse.jobs_from_output(text, "squeue") == parse.jobs_from_document(json.loads(text), "squeue")
    name = "scontrol_nodes.json" if (recorded.dir / "scontrol_nodes.json").exists() else "sinfo.json"
    text = (recorded.dir / name).read_text()
    assert parse.nodes_from_output(text, name) == parse.nodes_from_document(json.loads(text), name)


def test_what_the_fast_reader_refuses_is_read_as_before() -> None:
    """NaN (Python's JSON reads it, strict JSON does not), an entry that is not an object, jobs that
    are not a list, an oversized integer: each answer ends as the full reader ends it."""
    doc = json.loads((FIXTURES / "24.11" / "squeue.json").read_text())
    doc["jobs"][0]["cpus"] = {"set": True, "infinite": False, "number": float("nan")}
    nan = json.dumps(doc)
    assert "NaN" in nan
    assert parse.jobs_from_output(nan, "squeue") == parse.jobs_from_document(json.loads(nan), "squeue")
    skipped: list[str] = []
    odd = json.dumps({"jobs": [5, *doc["jobs"][1:]], "errors": []})
    assert [j.job_id for j in parse.jobs_from_output(odd, "squeue", skipped)] == [j["job_id"] for j in doc["jobs"][1:]]
    assert skipped and "not an object" in skipped[0]
    for out, message in (('{"jobs": {"1": {}}}', "not a list"), ('{"jobs": [' + "9" * 5000 + "]}", "cannot be read"),
                         ('{"jobs": [], "errors": [{"description": "boom"}]}', "boom"), ("[]", "not an object")):
        with pytest.raises(SlurmError, match=message):
            parse.jobs_from_output(out, "squeue")


def test_the_collector_runs_again_after_a_read() -> None:
    import gc

    text = (FIXTURES / "24.11" / "squeue.json").read_text()
    assert gc.isenabled()
    parse.jobs_from_output(text, "squeue")
    assert gc.isenabled()
    with pytest.raises(SlurmError):
        parse.jobs_from_output("[]", "squeue")
    assert gc.isenabled()


def test_without_msgspec_the_standard_library_reads_everything(recorded: Recorded, monkeypatch) -> None:
    text = (recorded.dir / "squeue.json").read_text()
    fast = parse.jobs_from_output(text, "squeue")
    monkeypatch.setattr(parse, "_entry_decoder", lambda key, fields: None)
    assert parse.jobs_from_output(text, "squeue") == fast == parse.jobs_from_document(json.loads(text), "squeue")
