"""The daemon's spool directory: its heartbeat for job_submit.lua, and the events that wake it.

    <spool>/heartbeat        "<unix time> <mode> <lease_s> <stale_after_s>", rewritten atomically
    <spool>/events/submitted touched by job_submit.lua when it tags a job
    <spool>/events/ended     touched by the EpilogSlurmctld script when a job ends

The directory belongs to SlurmUser (slurmctld writes the events) and is not writable by users.
Events carry no data: the daemon reads the truth from Slurm. It waits for them with inotify and
falls back to checking the files' times where inotify is missing.
"""

from __future__ import annotations

import logging
import os
import pwd
import time
from pathlib import Path

log = logging.getLogger(__name__)
EVENTS = ("submitted", "ended")


class Spool:
    def __init__(self, directory: str | os.PathLike[str], owner: str | None = None):
        self.root = Path(directory)
        self.events = self.root / "events"
        self.owner = owner
        self._inotify = None
        self._seen: dict[str, float] = {}

    def prepare(self) -> None:
        """Create the directories; events/ must be writable by SlurmUser (slurmctld, epilog)."""
        self.events.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        os.chmod(self.events, 0o755)
        if self.owner and os.geteuid() == 0:
            try:
                entry = pwd.getpwnam(self.owner)
            except KeyError:
                log.warning("spool: user %s does not exist; events/ stays owned by root", self.owner)
            else:
                os.chown(self.events, entry.pw_uid, entry.pw_gid)
        for name in EVENTS:
            path = self.events / name
            if path.exists():
                self._seen[name] = path.stat().st_mtime_ns
        try:
            import inotify_simple
        except ImportError:
            log.info("spool: inotify_simple not installed; checking %s every 0.2 s", self.events)
            return
        self._inotify = inotify_simple.INotify()
        flags = inotify_simple.flags
        self._inotify.add_watch(str(self.events), flags.CLOSE_WRITE | flags.ATTRIB | flags.CREATE
                                | flags.MOVED_TO)

    def beat(self, mode: str, lease_s: float, stale_after_s: float, now: float | None = None) -> None:
        now = time.time() if now is None else now
        tmp = self.root / ".heartbeat.tmp"
        tmp.write_text(f"{int(now)} {mode} {int(lease_s)} {int(stale_after_s)}\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, self.root / "heartbeat")

    def stop_beating(self) -> None:
        """On a clean stop: job_submit.lua lets new jobs through at once instead of after stale_after_s."""
        try:
            (self.root / "heartbeat").unlink()
        except FileNotFoundError:
            pass

    def wait(self, timeout_s: float) -> set[str]:
        """The events that came within `timeout_s` (empty set on timeout)."""
        if self._inotify is not None:
            events = self._inotify.read(timeout=max(int(timeout_s * 1000), 0))
            return {e.name for e in events if e.name in EVENTS}
        deadline = time.monotonic() + timeout_s
        while True:
            got = self._changed()
            if got or time.monotonic() >= deadline:
                return got
            time.sleep(min(0.2, max(deadline - time.monotonic(), 0)))

    def drain(self, window_s: float, max_s: float | None = None) -> set[str]:
        """Events that keep arriving within `window_s` of each other (one batch of submissions),
        for at most `max_s` (default 4 windows) so that a steady stream cannot starve placement."""
        got: set[str] = set()
        deadline = time.monotonic() + (4 * window_s if max_s is None else max_s)
        while time.monotonic() < deadline:
            more = self.wait(min(window_s, max(deadline - time.monotonic(), 0)))
            if not more:
                break
            got |= more
        return got

    def _changed(self) -> set[str]:
        got = set()
        for name in EVENTS:
            try:
                mtime = (self.events / name).stat().st_mtime_ns
            except FileNotFoundError:
                continue
            if self._seen.get(name) != mtime:
                self._seen[name] = mtime
                got.add(name)
        return got
