"""The Slurm client over Slurm's own commands and their JSON output.

Reads: `squeue --json`, `sacct --json`, `scontrol show nodes --json` (23.02+; `sinfo --json`
on 22.05, which has no `scontrol --json`), `scontrol show partition -o` (the JSON of 24.11 has
no Default flag) and `scontrol show topology`. Writes: `scontrol` and `scancel`, each as an
argument list with a timeout.
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import hostlist

from slurm_liquid.slurm import parse
from slurm_liquid.slurm.errors import SlurmCommandError, SlurmError
from slurm_liquid.slurm.models import Job, Node, Partition, SlurmVersion
from slurm_liquid.slurm.runner import CommandRunner, LocalRunner

if TYPE_CHECKING:
    from slurm_liquid.topology import Topology

COMMENT_LIMIT = 1024  # slurmctld rejects longer comments
_UPDATE_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*")
SCONTROL_JSON_SINCE = SlurmVersion(23, 2, 0)
SACCT_JSON_EXIT_CODES_SINCE = SlurmVersion(23, 2, 0)
# 22.05 takes `TresPerNode=gres:gpu:N`; it stores `gres/gpu:N` verbatim but keeps the old GPU count.
TRES_SLASH_SINCE = SlurmVersion(23, 2, 0)


def _only(jobs: list[Job], ids: Sequence[int] | None) -> list[Job]:
    """The jobs whose ids were asked for (all when none were)."""
    if ids is None:
        return jobs
    wanted = set(ids)
    return [j for j in jobs if j.job_id in wanted]


class CliBackend:
    """Slurm through its command-line tools; works with every Slurm version we ship."""

    name = "cli"

    def __init__(self, runner: CommandRunner | None = None, timeout_s: float = 30.0):
        if not 0 < timeout_s <= 86400:  # every command must end: no 0, no infinity, no NaN
            raise SlurmError(f"the Slurm command timeout must be in (0, 86400] seconds, not {timeout_s!r}")
        self.runner = runner or LocalRunner()
        self.timeout_s = timeout_s
        # why entries of Slurm's answers were skipped (see parse's module doc), the latest 1,000;
        # a caller may count and clear it, e.g. once per daemon pass
        self.skipped: deque[str] = deque(maxlen=1000)

    # ------------------------------------------------------------ plumbing

    def _run(self, *argv: str, stdin: str | None = None) -> str:
        return self.runner(list(argv), timeout=self.timeout_s, stdin=stdin)

    def _json(self, *argv: str) -> Mapping[str, Any]:
        return parse.loads(self._run(*argv), " ".join(argv))

    @cached_property
    def _version(self) -> SlurmVersion:
        return SlurmVersion.parse(self._run("scontrol", "--version"))

    def version(self) -> SlurmVersion:
        return self._version

    # ------------------------------------------------------------ reads

    def jobs(self, job_ids: Iterable[int] | None = None) -> list[Job]:
        """Jobs slurmctld still knows (pending, running, recently ended), of every user."""
        argv = ["squeue", "--json"]
        ids = sorted({int(j) for j in job_ids}) if job_ids is not None else None
        if ids is not None:
            if not ids:
                return []
            argv.append("--jobs=" + ",".join(map(str, ids)))
        try:
            out = self._run(*argv)
        except SlurmCommandError as exc:
            # squeue exits 1 with "Invalid job id specified" when every asked-for job is gone.
            if ids is not None and "Invalid job id" in exc.stderr:
                return []
            raise
        jobs = parse.jobs_from_output(out, "squeue", self.skipped, where=" ".join(argv))
        # Slurm 22.05's `squeue --json` ignores --jobs and prints every job: filter here too.
        return _only(jobs, ids)

    def gres_detail(self, job_ids: Iterable[int]) -> dict[int, dict[str, str]]:
        """{job id: {node: GRES with device indices}} as slurmctld allocated them, e.g.
        {7: {'gpu01': 'gpu:h100:2(IDX:0-1)'}}: what `scontrol show job -d` prints per node, read
        from `squeue --json` where no user-chosen text can pass for it. Jobs Slurm no longer knows,
        or that hold no GRES, are left out."""
        ids = sorted({int(j) for j in job_ids})
        if not ids:
            return {}
        try:
            doc = self._json("squeue", "--json", "--jobs=" + ",".join(map(str, ids)))
        except SlurmCommandError as exc:
            if "Invalid job id" in exc.stderr:
                return {}
            raise
        details = parse.gres_details_from_document(doc, "squeue")
        return {j: details[j] for j in ids if j in details}    # 22.05 ignores --jobs

    def job(self, job_id: int) -> Job | None:
        """One job, from slurmctld if it still knows it, else from accounting."""
        live = self.jobs([job_id])
        if live:
            return live[0]
        done = self.accounting([job_id])
        return done[0] if done else None

    def accounting(self, job_ids: Iterable[int] | None = None, since: datetime | None = None,
                   until: datetime | None = None) -> list[Job]:
        """Jobs from slurmdbd (sacct), all users. Without ids or `since`, sacct's default window (today)."""
        filters = ["--allusers"]
        ids = sorted({int(j) for j in job_ids}) if job_ids is not None else None
        if ids is not None:
            if not ids:
                return []
            filters.append("--jobs=" + ",".join(map(str, ids)))
        if since is not None:
            filters.append("--starttime=" + since.strftime("%Y-%m-%dT%H:%M:%S"))
        if until is not None:
            filters.append("--endtime=" + until.strftime("%Y-%m-%dT%H:%M:%S"))
        jobs = parse.jobs_from_document(self._json("sacct", "--json", *filters), "sacct", self.skipped)
        if self.version() < SACCT_JSON_EXIT_CODES_SINCE and any(j.is_finished for j in jobs):
            codes = parse.exit_codes_from_sacct_text(self._run(
                "sacct", "--noheader", "--parsable2", "--allocations", "--format=JobIDRaw,ExitCode", *filters))
            jobs = [dataclasses.replace(j, exit_code=codes.get(j.job_id, j.exit_code)) if j.is_finished else j
                    for j in jobs]
        return _only(jobs, ids)

    def nodes(self) -> list[Node]:
        if self.version() >= SCONTROL_JSON_SINCE:
            argv = ("scontrol", "show", "nodes", "--json")
            return parse.nodes_from_output(self._run(*argv), "scontrol show nodes", self.skipped, " ".join(argv))
        return parse.nodes_from_output(self._run("sinfo", "--json"), "sinfo", self.skipped, "sinfo --json")

    def partitions(self) -> list[Partition]:
        out = self._run("scontrol", "show", "partition", "--oneliner")
        return parse.partitions_from_text(out, skipped=self.skipped)

    def topology(self) -> "Topology":
        from slurm_liquid.topology import Topology

        text = self._run("scontrol", "show", "topology")
        if not text.strip():
            return Topology.flat([n.name for n in self.nodes()])
        return Topology.from_scontrol(text)

    def batch_script(self, job_id: int) -> str:
        """The batch script of a job slurmctld still holds (operators and the job's owner only)."""
        return self._run("scontrol", "write", "batch_script", str(int(job_id)), "-")

    # ------------------------------------------------------------ writes

    def submit(self, script: str, args: Sequence[str] = ()) -> int:
        """sbatch a script given as text (on stdin); returns the job id."""
        out = self._run("sbatch", "--parsable", *args, stdin=script)
        try:
            return int(out.strip().split(";")[0])
        except ValueError:
            raise SlurmError(f"sbatch printed {out.strip()!r} instead of a job id") from None

    def hold(self, job_id: int) -> None:
        self._run("scontrol", "hold", str(int(job_id)))

    def release(self, job_id: int) -> None:
        self._run("scontrol", "release", str(int(job_id)))

    def requeue_hold(self, job_id: int) -> None:
        """Stop a running job and put it back in the queue, held (it keeps its id)."""
        self._run("scontrol", "requeuehold", str(int(job_id)))

    def cancel(self, job_id: int) -> None:
        self._run("scancel", str(int(job_id)))

    def signal(self, job_id: int, signal: str, batch_only: bool = False) -> None:
        """Send a signal to the job's batch script only, or to it and every step (the default)."""
        if not re.fullmatch(r"(SIG)?[A-Z0-9]+", signal):
            raise SlurmError(f"invalid signal name {signal!r}")
        self._run("scancel", f"--signal={signal}", "--batch" if batch_only else "--full", str(int(job_id)))

    def update_job(self, job_id: int, **fields: str | int) -> None:
        """`scontrol update JobId=N Key=Value ...`, e.g. update_job(7, TresPerNode="gres/gpu:2", NumNodes=1)."""
        self.update_jobs([job_id], **fields)

    def update_jobs(self, job_ids: Sequence[int], **fields: str | int) -> None:
        """The same fields on several jobs in one command: `scontrol update JobId=A,B,... Key=Value`. scontrol
        sends slurmctld one update per job (checked on 22.05 and 24.11) but it is one process, not one per
        job. When a job of the list cannot be updated (ended meanwhile) the others still are, and this
        raises; updating again is harmless."""
        if not fields or not job_ids:
            raise SlurmError("update_job needs at least one field" if job_ids else "update_jobs needs at least one job")
        pairs = []
        for key, value in fields.items():
            value = str(value)
            if not _UPDATE_KEY.fullmatch(key) or "\n" in value:
                raise SlurmError(f"invalid job field {key}={value!r}")
            pairs.append(f"{key}={value}")
        self._run("scontrol", "update", "JobId=" + ",".join(str(int(j)) for j in job_ids), *pairs)

    def resize(self, job_id: int, gpus_per_node: int, num_nodes: int | None = None,
               nodes: Sequence[str] | None = None, gpu_type: str | None = None) -> None:
        """Set a pending (or requeue-held) job's GPUs per node, node count and node list in one update."""
        if gpus_per_node < 0 or (num_nodes is not None and num_nodes < 1):
            raise SlurmError(f"job {job_id}: cannot resize to {gpus_per_node} GPUs per node on {num_nodes} nodes")
        prefix = "gres/" if self.version() >= TRES_SLASH_SINCE else "gres:"
        fields: dict[str, str | int] = {"TresPerNode": prefix + ":".join(["gpu", *([gpu_type] if gpu_type else []),
                                                                           str(gpus_per_node)])}
        if num_nodes is not None:
            fields["NumNodes"] = num_nodes
        if nodes:
            fields["ReqNodeList"] = hostlist.collect_hostlist(list(nodes))
        self.update_job(job_id, **fields)

    def set_comment(self, job_id: int, comment: str) -> None:
        if len(comment) > COMMENT_LIMIT:
            raise SlurmError(f"comment of job {job_id} has {len(comment)} characters; Slurm takes at most {COMMENT_LIMIT}")
        self.update_job(job_id, Comment=comment)

    def set_recorded_admin_comment(self, job_id: int, admin_comment: str) -> None:
        """AdminComment of a job in accounting (`sacctmgr modify job`): works after the job ended,
        when `scontrol update` refuses ("Job has already finished"). Operators and root only."""
        if len(admin_comment) > COMMENT_LIMIT or "\n" in admin_comment:
            raise SlurmError(f"admin comment of job {job_id}: one line of at most {COMMENT_LIMIT} characters")
        self._run("sacctmgr", "--immediate", "modify", "job", "where", f"jobid={int(job_id)}",
                  "set", f"AdminComment={admin_comment}")
