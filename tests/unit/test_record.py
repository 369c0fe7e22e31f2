"""The decision record (job Comment) and the trusted tag (AdminComment): format, limits, parsing."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from slurm_liquid.record import COMMENT_LIMIT, FIELDS, VERSION, Record, Tag, with_tag

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
