"""Property tests of the Slurm parsers: any answer gives the jobs and nodes it can, or SlurmError.

Inputs are the recorded answers of every version (22.05 openapi v0.0.38, 24.11 v0.0.42, 26.05
v0.0.45) with entries broken by tests/unit/hostile.py (driven by hypothesis through
st.randoms(), so failures shrink and replay), and values hypothesis builds from scratch.
The key property: an entry nobody touched is read exactly as in the clean answer, however
broken its neighbours are -- one user's job never hides the others from the daemon.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache

import hostlist
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_liquid.slurm import CliBackend, SlurmError, SlurmVersion, parse
from slurm_liquid.slurm.runner import decode
from slurm_liquid.topology import Topology
from tests.unit import hostile

READERS = {
    "squeue": ("squeue.json", "jobs", lambda doc, skipped: parse.jobs_from_document(doc, "squeue", skipped)),
    "sacct": ("sacct.json", "jobs", lambda doc, skipped: parse.runs_from_document(doc, "sacct", skipped)),
    "nodes": (None, "nodes", lambda doc, skipped: parse.nodes_from_document(doc, "nodes", skipped)),
}
KINDS = [(version, what) for version in hostile.SLURM_VERSIONS for what in READERS]
fuzz_settings = settings(max_examples=25, suppress_health_check=[HealthCheck.too_slow])


def _doc(version: str, what: str) -> dict:
    name, _, _ = READERS[what]
    return hostile.slurm_doc(version, name or hostile.NODES_FILE[version])


@lru_cache(maxsize=None)
def _read_each(version: str, what: str) -> tuple:
    """What each entry of the clean answer reads as on its own (None where it is skipped)."""
    _, key, read = READERS[what]
    doc = _doc(version, what)
    return tuple(next(iter(read(dict(doc, **{key: [raw]}), [])), None) for raw in doc[key])


@pytest.mark.parametrize("version, what", KINDS)
@fuzz_settings
@given(rng=st.randoms(use_true_random=False))
def test_broken_entries_are_skipped_and_the_others_read_as_before(version, what, rng: random.Random):
    clean = _doc(version, what)
    _, key, read = READERS[what]
    broken, hit = hostile.mutate_entries(clean, key, rng)
    skipped: list[str] = []
    result = read(broken, skipped)
    expected = [job for i, job in enumerate(_read_each(version, what)) if i not in hit and job is not None]
    for item in expected:
        assert item in result
    assert len(result) + len(skipped) >= len(expected)
    assert all(reason.startswith(f"{'nodes' if what == 'nodes' else what}: skipped") for reason in skipped)


@pytest.mark.parametrize("version, what", KINDS)
@fuzz_settings
@given(rng=st.randoms(use_true_random=False))
def test_a_broken_document_is_read_or_a_slurm_error(version, what, rng: random.Random):
    _, _, read = READERS[what]
    try:
        read(hostile.mutate_json(_doc(version, what), rng), [])
    except SlurmError:
        pass


@pytest.mark.parametrize("version", hostile.SLURM_VERSIONS)
@fuzz_settings
@given(rng=st.randoms(use_true_random=False))
def test_any_bytes_from_squeue_are_jobs_or_a_slurm_error(version, rng: random.Random):
    """Invalid UTF-8, truncation, 100,000-deep nesting: through the client, as the runner decodes them."""
    text = decode(hostile.mutate_bytes(hostile.slurm_text(version, "squeue.json").encode(), rng))

    def runner(argv, *, timeout, stdin=None):
        return text if argv[0] == "squeue" else hostile.slurm_text(version, "version.txt")

    try:
        CliBackend(runner).jobs()
    except SlurmError:
        pass


# values hypothesis builds itself: every JSON type, NaN, infinities, 400-digit integers, nesting
json_scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=2 ** 31, max_value=10 ** 400)
                | st.integers(max_value=-1) | st.floats(allow_nan=True, allow_infinity=True)
                | st.sampled_from(hostile.SCALARS) | st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
slurm_number = st.fixed_dictionaries({"set": json_values, "infinite": json_values, "number": json_values})
entries = st.dictionaries(st.sampled_from(sorted(hostile.READ_KEYS)), json_values | slurm_number, max_size=12)


@given(st.lists(entries | json_values, max_size=4))
def test_any_entries_are_read_or_skipped_never_raised(raws):
    for what in READERS:
        _, key, read = READERS[what]
        skipped: list[str] = []
        assert len(read({key: raws}, skipped)) + len(skipped) == len(raws)


@given(json_values)
def test_any_json_document_is_read_or_a_slurm_error(doc):
    for what in READERS:
        try:
            READERS[what][2](doc, [])
        except SlurmError:
            pass
    try:
        parse.loads(json.dumps(doc), "squeue --json")
    except SlurmError:
        pass


@given(st.text(max_size=300))
def test_any_text_is_read_by_the_line_parsers(text):
    parse.partitions_from_text(text)
    parse.exit_codes_from_sacct_text(text)
    try:
        SlurmVersion.parse(text)
    except SlurmError:
        pass


@given(st.text(alphabet=st.sampled_from("SwitchNamLevlnkSpd=[]-,0123456789 \n#\\s"), max_size=200))
def test_any_scontrol_topology_is_a_topology_or_a_usage_error(text):
    from slurm_liquid.errors import UsageError

    try:
        Topology.from_scontrol(text)
    except UsageError:
        pass


# ------------------------------------------------------------------ render / parse round trips

@given(st.integers(0, 99999), st.integers(0, 99), st.integers(0, 99999))
def test_versions_round_trip(major, minor, micro):
    version = SlurmVersion(major, minor, micro)
    assert SlurmVersion.parse(f"slurm {version}") == version


names = st.lists(st.builds("{}{}".format, st.sampled_from(["gpu", "node-", "r1n"]), st.integers(0, 999)),
                 min_size=1, max_size=30, unique=True)


@given(names)
def test_host_lists_round_trip(hosts):
    assert sorted(parse.expand_nodes(hostlist.collect_hostlist(hosts))) == sorted(hosts)


@given(st.integers(0, 9999), st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
def test_durations_round_trip(days, hours, minutes, seconds):
    rendered = f"{days}-{hours:02d}:{minutes:02d}:{seconds:02d}" if days else f"{hours:02d}:{minutes:02d}:{seconds:02d}"
    assert parse._duration_s(rendered) == ((days * 24 + hours) * 60 + minutes) * 60 + seconds


@given(st.dictionaries(st.sampled_from(["cpu", "node", "billing", "gres/gpu", "gres/shard", "gres/gpu:h100"]),
                       st.integers(0, 2 ** 40), min_size=1), st.integers(0, 2 ** 40))
def test_tres_strings_round_trip(counts, mem):
    rendered = ",".join([f"{k}={v}" for k, v in counts.items()] + [f"mem={mem}M"])
    assert parse.parse_tres(rendered) == {**{k: float(v) for k, v in counts.items()}, "mem": float(mem)}


@given(st.integers(1, 2 ** 32 - 1), st.sampled_from(hostile.SLURM_VERSIONS), st.integers(1, 10 ** 6))
def test_times_round_trip_and_far_ones_stay_far(seconds, version, far_factor):
    number = seconds if version.startswith("22.") else {"set": True, "infinite": False, "number": seconds}
    assert parse.timestamp(number).timestamp() == seconds
    far = seconds * 10 ** 6 * far_factor
    assert parse.timestamp(far, beyond=parse.FAR_FUTURE) in (parse.FAR_FUTURE, parse.timestamp(far))


@given(st.text(alphabet=st.sampled_from("ab019[]-,"), max_size=24))
def test_the_bounded_host_list_expansion_agrees_with_python_hostlist(expr):
    """parse.expand_hostlist only adds a bound on the total; below it, it says what hostlist says."""
    try:
        expected = hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist:
        with pytest.raises(hostlist.BadHostlist):
            parse.expand_hostlist(expr)
        return
    assert parse.expand_hostlist(expr) == expected
