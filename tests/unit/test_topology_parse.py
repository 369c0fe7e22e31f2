"""The switch-line parser shared by topology.conf and `scontrol show topology`."""

from pathlib import Path

import pytest

from slurm_liquid.errors import UsageError
from slurm_liquid.topology import SwitchSpec, parse_switch_lines

FIXTURES = Path(__file__).parents[1] / "fixtures" / "topology"


def test_topology_conf_with_comments_blank_lines_and_continuations():
    text = """
    # leaf switches
    SwitchName=s1 Nodes=gpu[01-03] LinkSpeed=100   # rack 1
    SwitchName=s2 \\
        Nodes=gpu[04-05],gpu07

    SwitchName=top Switches=s[1-2]
    """
    specs = parse_switch_lines(text)
    assert [s.name for s in specs] == ["s1", "s2", "top"]
    assert specs[0] == SwitchSpec("s1", ("gpu01", "gpu02", "gpu03"), (), 100.0, None, 3)
    assert specs[1].nodes == ("gpu04", "gpu05", "gpu07")
    assert specs[2].switches == ("s1", "s2") and specs[2].link_speed == 1.0


def test_scontrol_output_keeps_levels_and_reads_null_lists():
    specs = parse_switch_lines((FIXTURES / "small_scontrol.txt").read_text() +
                               "SwitchName=x Level=0 LinkSpeed=1 Nodes=n1 Switches=(null)\n")
    assert [s.level for s in specs] == [0, 0, 1, 0]
    assert specs[2].nodes == ("gpu01", "gpu02", "gpu03", "gpu04") and specs[2].switches == ("leaf1", "leaf2")
    assert specs[3].switches == ()


def test_keys_are_case_insensitive():
    (spec,) = parse_switch_lines("switchname=s1 nodes=a,b linkspeed=5")
    assert spec.nodes == ("a", "b") and spec.link_speed == 5


def test_unknown_key_is_an_error_only_when_strict():
    with pytest.raises(UsageError, match="line 1: unknown key 'Foo'"):
        parse_switch_lines("SwitchName=s1 Nodes=a Foo=1")
    (spec,) = parse_switch_lines("SwitchName=s1 Nodes=a Foo=1", strict=False)
    assert spec.nodes == ("a",)


def test_lenient_mode_skips_lines_that_name_no_switch():
    (spec,) = parse_switch_lines("Topology=default Plugin=tree\nSwitchName=s1 Nodes=a", strict=False)
    assert spec.name == "s1"
    with pytest.raises(UsageError, match="missing SwitchName"):
        parse_switch_lines("Nodes=x\nSwitchName=s1 Nodes=a")  # strict


@pytest.mark.parametrize("text, message", [
    ("", "no SwitchName"),
    ("# only a comment\n", "no SwitchName"),
    ("Nodes=a", "line 1: missing SwitchName"),
    ("BlockName=b1 Nodes=a", "line 1: unknown key 'BlockName'"),
    ("SwitchName=s1", "line 1: switch 's1' is empty"),
    ("SwitchName=s1 Nodes=(null)", "switch 's1' is empty"),
    ("SwitchName=s1 Nodes=a\n\nSwitchName=s1 Nodes=b", "line 3: switch 's1' already defined on line 1"),
    ("SwitchName=s1 Nodes=gpu[01-", "line 1: bad Nodes="),
    ("SwitchName=s1 Nodes=a LinkSpeed=fast", "LinkSpeed='fast' is not a number"),
    ("SwitchName=s1 Nodes=a LinkSpeed=0", "LinkSpeed='0' must be positive"),
    ("SwitchName=s1 Nodes=a junk", "'junk' is not Key=Value"),
    ("SwitchName=s1 Nodes=a Nodes=b", "Nodes given twice"),
])
def test_malformed_lines_name_the_problem(text, message):
    with pytest.raises(UsageError, match=message):
        parse_switch_lines(text)
