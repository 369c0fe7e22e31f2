"""The decision record (job Comment) and the trusted tag (AdminComment): format, limits, parsing."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from slurm_liquid.ledger import COMMENT_LIMIT, FIELDS, VERSION, Record, Tag, with_tag

# Keys as the code writes them; values are anything (with_fields cleans them into one word).
KEYS = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=8)
VALUES = st.text(min_size=0, max_size=60)
SPEC_WORDS = st.text("abcdefghijklmnopqrstuvwxyz0123456789-=.:'", min_size=1, max_size=20)
SPECS = st.lists(SPEC_WORDS, max_size=8).map(" ".join)


@given(st.dictionaries(KEYS, VALUES, max_size=8), SPECS)
def test_render_parse_round_trip(values: dict[str, str], spec: str) -> None:
    record = Record(spec=spec).with_fields(**values)
    for value in record.fields.values():  # cleaning leaves one word the line format can carry
        assert not any(c.isspace() or c in "|=" for c in value)
    parsed = Record.parse(record.render())
    assert parsed == record


@given(st.dictionaries(st.sampled_from(FIELDS), st.text(min_size=1, max_size=300), min_size=1),
       st.text("abc= ", min_size=0, max_size=3000), st.integers(80, COMMENT_LIMIT))
def test_render_never_exceeds_the_limit_and_cuts_the_spec_first(values, spec, limit) -> None:
    record = Record(spec=spec.strip()).with_fields(**values)
    line = record.render(limit)
    assert len(line) <= limit
    head = Record(fields=record.fields).render(10_000)
    if len(head) + len(" | ...") < limit:  # room for the decision: every field survives whole
        assert Record.parse(line).fields == record.fields
        assert line.startswith(head)


def test_long_spec_is_cut_with_an_ellipsis_and_fields_kept() -> None:
    record = Record(spec="model=bert-large " + "x" * 2000).with_fields(mode="adjust", asked="gpu:4", set="gpu:1")
    line = record.render()
    assert len(line) == COMMENT_LIMIT and line.endswith("...")
    parsed = Record.parse(line)
    assert parsed.fields == {"mode": "adjust", "asked": "gpu:4", "set": "gpu:1"}
    assert parsed.spec.startswith("model=bert-large x")


def test_fields_are_written_in_reading_order() -> None:
    record = Record().with_fields(zeta="1", note="n", mode="advise", est="2xh100:31G")
    assert record.render() == f"{VERSION} mode=advise est=2xh100:31G note=n zeta=1"


def test_with_fields_none_removes_and_values_become_one_word() -> None:
    record = Record().with_fields(note="two words | a=b 'q'", placed="gpu01:2")
    assert record.get("note") == "two-words--ab-q"
    assert record.with_fields(note=None).fields == {"placed": "gpu01:2"}


@pytest.mark.parametrize("text", ["", "liquid: model=x batch-size=3", "liquid/10 mode=adjust",
                                  "just a note", "xliquid/1 mode=adjust", "liquid/2 mode=x"])
def test_parse_of_non_records_is_none(text: str) -> None:
    assert Record.parse(text) is None


def test_parse_reads_only_key_value_words_of_the_head() -> None:
    record = Record.parse("  liquid/1 mode=adjust stray =x est=1xh100:9G | model=a batch-size=2 | tail ")
    assert record.fields == {"mode": "adjust", "est": "1xh100:9G"}
    assert record.spec == "model=a batch-size=2 | tail"
    assert Record.parse(VERSION) == Record()


def test_tag_is_found_among_other_segments() -> None:
    tag = Tag.parse("checked by ops; liquid/1 state=placed placed=gpu[01-02]:4 why=x ; liquid/1 mode=adjust")
    assert tag == Tag("placed", "gpu[01-02]:4", {"why": "x"})
    assert Tag.parse(tag.render()) == tag
    # a record without state= is not a tag, and no record at all gives None
    assert Tag.parse("liquid/1 mode=adjust") is None
    assert Tag.parse("ops note: liquid/1 state=held") is None
    assert Tag.parse("") is None


def test_with_tag_replaces_ours_and_keeps_other_segments() -> None:
    before = "agent: node ok; liquid/1 state=held; liquid/1 mode=adjust"
    after = with_tag(before, Tag("placed", "gpu03:4"))
    segments = [s.strip() for s in after.split(";")]
    assert segments[0] == "liquid/1 state=placed placed=gpu03:4"
    assert "agent: node ok" in segments and "liquid/1 mode=adjust" in segments
    assert sum("state=" in s for s in segments) == 1
    assert with_tag("", Tag("held")) == "liquid/1 state=held"
    assert len(with_tag("x" * 2000, Tag("held"))) <= COMMENT_LIMIT


# --- the agent's usage segment in AdminComment ------------------------------------------------

from slurm_liquid.ledger import Usage, with_usage  # noqa: E402

NODES = st.lists(st.sampled_from([f"gpu{i:02d}" for i in range(1, 40)]), min_size=1, max_size=12, unique=True)
USAGES = st.builds(Usage, by=st.sampled_from(["nvml", "nvml-acct", "standin", "none"]), gpus=st.integers(0, 64),
                   peak_mib=st.integers(0, 200_000), util=st.none() | st.integers(0, 100).map(float),
                   host_mib=st.integers(0, 2_000_000), cpus=st.integers(0, 2000).map(lambda v: v / 10),
                   shared=st.booleans(), seconds=st.integers(0, 10**7), samples=st.integers(0, 10**6),
                   nodes=NODES.map(lambda n: tuple(sorted(n))))


@given(USAGES)
def test_usage_round_trips_and_stays_short(usage: Usage) -> None:
    line = usage.render()
    assert Usage.parse(line) == usage
    assert len(line) < 300


def test_usage_sits_beside_the_tag_and_neither_disturbs_the_other() -> None:
    tag = Tag("placed", "gpu01:2", {"at": "17"})
    used = Usage("nvml", 2, 31200, 87.0, 12000, 3.5, False, 3600, 720, ("gpu01",))
    both = with_usage(tag.render() + "; admin note", used)
    assert Tag.parse(both) == tag and Usage.parse(both) == used and "admin note" in both
    retagged = with_tag(both, Tag("released"))
    assert Usage.parse(retagged) == used and Tag.parse(retagged).state == "released"


def test_two_nodes_merge_into_one_segment() -> None:
    a = Usage("nvml", 2, 30000, 90.0, 10000, 4.0, False, 100, 100, ("gpu01",))
    b = Usage("standin", 4, 20000, 60.0, 16000, 2.0, True, 90, 90, ("gpu02",))
    merged = Usage.parse(with_usage(with_usage("", a), b))
    assert merged.gpus == 6 and merged.peak_mib == 30000 and merged.util == 70.0
    assert merged.host_mib == 16000 and merged.cpus == 4.0 and merged.shared and merged.by == "standin"
    assert merged.nodes == ("gpu01", "gpu02") and merged.samples == 190 and merged.seconds == 100
    assert with_usage(with_usage("", a), b).count(USAGE_TOKEN) == 1


def test_a_node_without_utilisation_readings_does_not_dilute_the_others() -> None:
    a = Usage("nvml", 2, 30000, 90.0, nodes=("gpu01",))
    b = Usage("nvml", 6, 30000, None, nodes=("gpu02",))
    assert "util=-" in b.render()
    assert Usage.parse(with_usage(with_usage("", a), b)).util == 90.0
    assert Usage.parse(b.render()).util is None


def test_the_same_node_again_replaces_its_reading_and_a_counted_node_is_not_added_twice() -> None:
    a = Usage("nvml", 2, 30000, 90.0, nodes=("gpu01",))
    a2 = Usage("nvml", 2, 35000, 80.0, nodes=("gpu01",))
    b = Usage("nvml", 2, 20000, 50.0, nodes=("gpu02",))
    assert Usage.parse(with_usage(with_usage("", a), a2)) == a2
    both = with_usage(with_usage("", a), b)
    assert Usage.parse(with_usage(both, a)) == Usage.parse(both)   # a retried write changes nothing


@pytest.mark.parametrize("text", ["", "liquid/1 state=held", "liquid-used/1 by=nvml gpus=two peak=1 util=1",
                                  "liquid-used/1 by=nvml peak=1 util=1", "liquid-used/1 by=nvml gpus=1 peak=1 util=1 nodes=gpu[01"])
def test_absent_or_malformed_usage_is_none(text: str) -> None:
    assert Usage.parse(text) is None


USAGE_TOKEN = "liquid-used/1"
