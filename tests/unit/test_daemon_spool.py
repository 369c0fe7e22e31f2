"""The daemon's spool: the heartbeat job_submit.lua reads, and the events that wake the daemon.

Every event test runs twice: with inotify and with the polling fallback (inotify_simple hidden).
Timeouts are short and only bound the waits; no test asserts on how long anything took.
"""

from __future__ import annotations

import os
import stat
import sys

import pytest

from slurm_liquid.daemon.spool import EVENTS, Spool

QUIET = 0.1     # seconds to wait for nothing


@pytest.fixture(params=["inotify", "polling"])
def spool(request, tmp_path, monkeypatch) -> Spool:
    if request.param == "polling":
        monkeypatch.setitem(sys.modules, "inotify_simple", None)   # `import inotify_simple` fails
    else:
        pytest.importorskip("inotify_simple")
    spool = Spool(tmp_path / "spool")
    spool.prepare()
    assert (spool._inotify is not None) == (request.param == "inotify")
    return spool


def touch(spool: Spool, name: str) -> None:
    """What job_submit.lua and the epilog do; an existing file gets a strictly newer time."""
    path = spool.events / name
    if path.exists():
        later = path.stat().st_mtime_ns + 1_000_000
        os.utime(path, ns=(later, later))
    else:
        path.write_text("")


def test_prepare_makes_a_spool_users_cannot_write(tmp_path) -> None:
    spool = Spool(tmp_path / "a" / "spool")
    spool.prepare()
    spool.prepare()                                           # idempotent: a restart
    for path in (spool.root, spool.events):
        assert path.is_dir() and stat.S_IMODE(path.stat().st_mode) == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_prepare_gives_events_to_the_slurm_user(tmp_path) -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    Spool(tmp_path / "s", owner="nobody").prepare()
    assert (tmp_path / "s" / "events").stat().st_uid == nobody.pw_uid
    Spool(tmp_path / "t", owner="no-such-user-here").prepare()   # warns, does not fail
    assert (tmp_path / "t" / "events").stat().st_uid == 0


def test_heartbeat_says_time_mode_lease_and_staleness(tmp_path) -> None:
    spool = Spool(tmp_path)
    spool.prepare()
    spool.beat("enforce", 60.0, 20.5, now=1_700_000_123.9)
    assert (tmp_path / "heartbeat").read_text() == "1700000123 enforce 60 20\n"
    spool.beat("shadow", 30, 8)                              # rewritten, not appended
    when, mode, lease, stale = (tmp_path / "heartbeat").read_text().split()
    assert int(when) > 1_700_000_123 and (mode, lease, stale) == ("shadow", "30", "8")
    assert stat.S_IMODE((tmp_path / "heartbeat").stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events", "heartbeat"]   # no temp file left


def test_heartbeat_is_replaced_atomically(tmp_path) -> None:
    spool = Spool(tmp_path)
    spool.prepare()
    spool.beat("enforce", 60, 20, now=1)
    reader = open(tmp_path / "heartbeat")                    # a reader that opened the old file ...
    spool.beat("enforce", 60, 20, now=2)
    assert reader.read() == "1 enforce 60 20\n"               # ... still reads a whole old beat
    reader.close()
    assert (tmp_path / "heartbeat").read_text() == "2 enforce 60 20\n"


def test_stop_beating_removes_the_heartbeat(tmp_path) -> None:
    spool = Spool(tmp_path)
    spool.prepare()
    spool.beat("enforce", 60, 20)
    spool.stop_beating()
    assert not (tmp_path / "heartbeat").exists()
    spool.stop_beating()                                      # twice is fine


def test_nothing_happens_means_an_empty_set(spool: Spool) -> None:
    assert spool.wait(QUIET) == set()
    assert spool.drain(0.05) == set()


@pytest.mark.parametrize("name", EVENTS)
def test_an_event_wakes_the_wait(spool: Spool, name: str) -> None:
    touch(spool, name)
    assert spool.wait(5) == {name}
    assert spool.wait(QUIET) == set()                           # seen once, not again


def test_an_event_on_a_file_that_already_existed(tmp_path, monkeypatch) -> None:
    for hide in (False, True):
        if hide:
            monkeypatch.setitem(sys.modules, "inotify_simple", None)
        spool = Spool(tmp_path / str(hide))
        spool.events.mkdir(parents=True)
        (spool.events / "submitted").write_text("")
        spool.prepare()
        assert spool.wait(QUIET) == set()                       # an old event is no news
        touch(spool, "submitted")                             # job_submit.lua touches it again
        assert spool.wait(5) == {"submitted"}


def test_other_files_are_not_events(spool: Spool) -> None:
    (spool.events / "submitted.tmp").write_text("")
    assert spool.wait(QUIET) == set()


def test_drain_collects_events_that_arrived_together(spool: Spool) -> None:
    touch(spool, "submitted")
    touch(spool, "ended")
    assert spool.drain(QUIET) == {"submitted", "ended"}
    assert spool.wait(QUIET) == set()


def test_drain_keeps_reading_while_events_come_and_stops_at_a_quiet_window(tmp_path) -> None:
    spool = Spool(tmp_path)
    script = [{"submitted"}, {"ended"}, {"submitted"}, set(), {"ended"}]
    spool.wait = lambda timeout_s: script.pop(0)             # one burst, a pause, then more
    assert spool.drain(0.5, max_s=60) == {"submitted", "ended"}
    assert script == [{"ended"}]                              # the event after the pause is left for later


def test_drain_stops_even_when_events_never_stop(tmp_path) -> None:
    spool = Spool(tmp_path)
    calls = []
    spool.wait = lambda timeout_s: calls.append(timeout_s) or {"submitted"}
    assert spool.drain(0.01, max_s=0.05) == {"submitted"}
    assert calls and all(0 <= t <= 0.01 for t in calls)
