"""The ledger: every codec of a Slurm field (record, tag, usage, placement, opt-in), its limits, and the
Lua plugins' copy of its constants, run in a real Lua 5.1 (lupa) against the Python rule."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from slurm_liquid.ledger import COMMENT_LIMIT, FIELDS, VERSION, LedgerError, Record, Tag, TagState, with_tag

# Keys as the code writes them; values are anything (with_fields cleans them into one word).
KEYS = st.from_regex(r"[a-z][a-z\-]{0,7}", fullmatch=True)
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
    assert tag == Tag("placed", "gpu[01-02]:4", extra={"why": "x"})
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
    tag = Tag("placed", "gpu01:2", at=17)
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


# --- the user's own Comment text (finding: it was overwritten, even in advise and shadow mode) ------

@given(st.text(max_size=400).filter(lambda s: "\n" not in s and not s.strip().lower().startswith(("liquid:", "liquid/"))),
       st.text("abcdefghijklmnopqrstuvwxyz0123456789-=. ", max_size=2000))
def test_the_users_own_text_survives_every_record(user: str, spec: str) -> None:
    record = Record.of_comment(user).with_fields(mode="advise", est="1xh100:9G")
    record = Record(record.fields, spec.strip(), record.user)
    line = record.render()
    assert len(line) <= COMMENT_LIMIT
    if user.strip():
        assert line.endswith(user.strip()) and Record.parse(line).user == user.strip()


def test_a_liquid_spec_comment_becomes_the_spec_not_user_text() -> None:
    assert Record.of_comment("liquid: model=x batch-size=2").user == ""
    assert Record.of_comment("run 42 of the sweep").user == "run 42 of the sweep"
    kept = Record.parse(Record.of_comment("run 42").with_fields(placed="gpu01:2").render())
    assert kept.get("placed") == "gpu01:2" and kept.user == "run 42"


# --- the tag: states, transitions, what it carries -------------------------------------------------

from slurm_liquid.ledger.tag import TRANSITIONS, TrustedSpec, spec_digest  # noqa: E402
from slurm_liquid.jobspec import parse_directives  # noqa: E402


@pytest.mark.parametrize("start", list(TagState))
@pytest.mark.parametrize("end", list(TagState))
def test_only_the_documented_transitions_are_allowed(start: TagState, end: TagState) -> None:
    tag = Tag(start)
    if end in TRANSITIONS[start]:
        assert tag.to(end).state == end
    else:
        with pytest.raises(LedgerError):
            tag.to(end)


def test_the_trusted_copy_is_bounded_by_the_site_and_round_trips() -> None:
    spec = "model=ResNet50 batch-size=256 elastic=2:4096 signal=USR2@86400"
    trusted = TrustedSpec.of(parse_directives(spec), spec, max_grace_s=300, max_gpus=16)
    assert (trusted.low, trusted.high, trusted.signal, trusted.grace_s, trusted.model, trusted.batch) == \
        (2, 16, "USR2", 300, "resnet50", 256)
    assert trusted.digest == spec_digest(spec) and trusted.digest != spec_digest(spec + " epochs=2")
    tag = Tag(TagState.PLACED, "gpu01:2", 17, trusted)
    assert Tag.parse(tag.render()) == tag


def test_a_placement_time_in_the_future_is_not_believed() -> None:
    tag = Tag.parse("liquid/1 state=placed placed=gpu01:4 at=99999999999")
    assert tag.at == 99999999999 and tag.placed_at(now=1_700_000_000) is None
    assert Tag.parse("liquid/1 state=placed placed=gpu01:4 at=1699999990").placed_at(1_700_000_000) == 1699999990


TAGS = st.builds(Tag, state=st.sampled_from(list(TagState)),
                 placed=st.sampled_from(["", "gpu01:2", "gpu[01-04]:4", "gpu03:shard5", "gpu[01-02]:4+gpu03:1"]),
                 at=st.none() | st.integers(0, 10 ** 11),
                 trusted=st.none() | st.builds(TrustedSpec, low=st.just(1), high=st.integers(1, 64),
                                               signal=st.sampled_from(["USR1", "TERM"]), grace_s=st.integers(0, 999),
                                               model=st.sampled_from(["", "bert-base", "llama-2-7b"]),
                                               batch=st.none() | st.integers(1, 4096),
                                               digest=st.sampled_from(["", "0123456789ab"])),
                 extra=st.dictionaries(st.sampled_from(["why", "would", "change"]),
                                       st.text("abcdefghij-0123456789", min_size=1, max_size=20), max_size=3))


@given(TAGS)
def test_tags_round_trip(tag: Tag) -> None:
    assert Tag.parse(tag.render()) == tag


# --- garbage: nothing but None or the project's error ------------------------------------------------

from slurm_liquid.ledger import Placed, parse_placed  # noqa: E402

GARBAGE = st.text(max_size=300) | st.text("liquid/1 state=placedheldat=0123456789[]-:+;gpushard ", max_size=300)


@given(GARBAGE)
def test_garbage_never_raises_from_the_parsers(text: str) -> None:
    Tag.parse(text)
    Record.parse(text)
    Usage.parse(text)
    Record.of_comment(text).render()
    for parse in (parse_placed, Placed.parse):
        try:
            parse(text)
        except LedgerError:
            pass


def test_a_hostlist_naming_millions_of_nodes_is_refused_before_it_is_expanded() -> None:
    with pytest.raises(LedgerError):
        parse_placed("gpu[0-99999999]:4")
    with pytest.raises(LedgerError):
        parse_placed("a[0-9999]b[0-9999]:1")
    assert Usage.parse("liquid-used/1 by=nvml gpus=1 peak=1 util=1 nodes=gpu[0-99999999]") is None
    assert Tag.parse("liquid/1 state=placed placed=gpu[0-99999999]:4").placed == ""


# --- one opt-in rule, in Python and in both Lua plugins -------------------------------------------------

from slurm_liquid.ledger import opted_in  # noqa: E402
from slurm_liquid.ledger.lua import block_in, lua_block  # noqa: E402
import functools  # noqa: E402
from pathlib import Path  # noqa: E402

LUA = Path(__file__).resolve().parents[2] / "etc" / "slurm"


@pytest.mark.parametrize("plugin", ["job_submit.lua", "cli_filter.lua"])
def test_the_lua_plugins_carry_the_ledgers_constants(plugin: str) -> None:
    assert block_in((LUA / plugin).read_text()) == lua_block()


@pytest.mark.parametrize("script, comment, expected", [
    ("#!/bin/sh\n#LIQUID model=x\n", "", True),
    ("#!/bin/sh\n  #liquid model=x\n", "", True),
    ("#!/bin/sh\n#LIQUID\n", "", True),
    ("#LIQUID model=x", "", True),
    ("#!/bin/sh\n#LIQUIDATE everything\n", "", False),
    ("#!/bin/sh\necho '#LIQUID' model\n", "", False),
    ("", "liquid: model=x", True),
    ("", "  LIQUID: model=x", True),
    ("", "liquid/1 mode=advise", True),
    ("", "liquidity study", False),
    ("", "my liquid: test", False),
    ("", "", False),
])
def test_opt_in_examples(script: str, comment: str, expected: bool) -> None:
    assert opted_in(script, comment) is expected


@functools.lru_cache(maxsize=1)
def _lua_opted_in():
    """job_submit.lua's own opted_in(), run by Lua 5.1 (what Slurm 22.05 links)."""
    lupa = pytest.importorskip("lupa.lua51")
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    source = (LUA / "job_submit.lua").read_text()
    head = source[:source.index("local function daemon_state")]
    return lua.execute(head + "\nreturn function(script, comment) return opted_in({script = script, comment = comment}) end")


def test_lua_and_python_agree_on_the_examples() -> None:
    lua_opted_in = _lua_opted_in()
    for script, comment, expected in test_opt_in_examples.pytestmark[0].args[1]:
        assert bool(lua_opted_in(script or None, comment or None)) is expected, (script, comment)


@given(st.text(st.sampled_from(list("#LIQUIDliquid: /\t\n\rxa=")), max_size=40),
       st.text(st.sampled_from(list("LIQUIDliquid:/ \t\nx")), max_size=20))
def test_lua_and_python_read_the_opt_in_rule_the_same_way(script: str, comment: str) -> None:
    assert bool(_lua_opted_in()(script, comment)) == opted_in(script, comment)
