"""Write a job's measured usage into its accounting record (AdminComment), beside the daemon's tag.

Why `sacctmgr modify job` and not `scontrol update`: the agent learns a job ended from the node
epilog, when slurmctld already refuses updates ("Job has already finished"). Two orderings matter:

- slurmctld sends the job's end record (with *its* AdminComment) to slurmdbd when the job completes;
  writing before that arrives would be overwritten, so the recorder first waits until accounting no
  longer shows the run as running;
- the agents of a multi-node job each merge their node into one segment (read, merge, write). They
  take turns in node-list order: a node waits (bounded) for the nodes before it, so two
  read-merge-writes do not overlap and no node's part is lost.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import hostlist

from slurm_liquid.ledger import Record, Usage, with_usage
from slurm_liquid.slurm.client import SlurmClient
from slurm_liquid.slurm.errors import SlurmError

log = logging.getLogger(__name__)


@dataclass
class Recorder:
    client: SlurmClient
    node: str
    mode: str = "sacct"               # sacct | log | off
    order_wait_s: float = 20.0        # how long a node waits for the nodes before it in the list
    ended_wait_s: float = 120.0       # how long to wait for the job's end to reach accounting
    poll_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    # jobs recorded here whose measured peak per GPU exceeded the estimate of their record (est=); counted
    # by the first node of a job only (liquid_agent_under_estimates_total). The Comment is the user's claim:
    # it only feeds this count.
    under_estimated: int = 0
    _comment: str = ""

    def record(self, job_id: int, usage: Usage, nodelist: str = "") -> str | None:
        """Merge `usage` into the job's AdminComment; returns the written line (None when not written)."""
        if self.mode == "off":
            return None
        if self.mode == "log":
            log.info("job %d used: %s", job_id, usage.render())
            return None
        current = self._wait_ended(job_id)
        if current is None:
            log.warning("job %d: its end never reached accounting within %.0f s; usage not recorded: %s",
                        job_id, self.ended_wait_s, usage.render())
            return None
        current = self._wait_turn(job_id, current, self._before_me(nodelist))
        line = with_usage(current, usage)
        for attempt in range(3):
            try:
                self.client.set_recorded_admin_comment(job_id, line)
            except SlurmError as exc:
                log.warning("job %d: recording usage failed (try %d): %s", job_id, attempt + 1, exc)
                self.sleep(self.poll_s * (attempt + 1))
                continue
            after = self._admin_comment(job_id)
            written = Usage.parse(after or "")
            if written is not None and self.node in written.nodes:
                log.info("job %d: recorded %s", job_id, written.render())
                estimate = (Record.parse(self._comment) or Record()).estimate_mib()
                if estimate and usage.peak_mib > estimate and not self._before_me(nodelist):
                    self.under_estimated += 1
                return after
            line = with_usage(after or "", usage)   # another node wrote in between: merge again
        log.warning("job %d: usage not recorded after 3 tries: %s", job_id, usage.render())
        return None

    def _before_me(self, nodelist: str) -> list[str]:
        try:
            nodes = hostlist.expand_hostlist(nodelist) if nodelist else []
        except hostlist.BadHostlist:
            return []
        return nodes[:nodes.index(self.node)] if self.node in nodes else []

    def _admin_comment(self, job_id: int) -> str | None:
        """The AdminComment of the job's latest run in accounting, None while that run is still running."""
        try:
            runs = self.client.accounting([job_id])
        except SlurmError as exc:
            log.debug("job %d: sacct failed: %s", job_id, exc)
            return None
        # accounting() gives the latest run of each id; a requeued job's next run may be PENDING already
        if not runs or runs[0].state in ("RUNNING", "COMPLETING"):
            return None
        self._comment = runs[0].comment or ""
        return runs[0].admin_comment

    def _wait_ended(self, job_id: int) -> str | None:
        deadline = self.clock() + self.ended_wait_s
        while True:
            current = self._admin_comment(job_id)
            if current is not None or self.clock() >= deadline:
                return current
            self.sleep(self.poll_s)

    def _wait_turn(self, job_id: int, current: str, before: list[str]) -> str:
        deadline = self.clock() + self.order_wait_s
        while before:
            usage = Usage.parse(current)
            missing = [n for n in before if usage is None or n not in usage.nodes]
            if not missing:
                break
            if self.clock() >= deadline:
                log.info("job %d: %s did not record within %.0f s; recording %s anyway",
                         job_id, ",".join(missing), self.order_wait_s, self.node)
                break
            self.sleep(self.poll_s)
            current = self._admin_comment(job_id) or current
        return current
