"""The agent's process -> Slurm job mapping: the three parsers against recorded /proc layouts, and
scan() over fake /proc trees built under tmp_path (and once over this machine's real /proc)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_liquid.agent import procs
from slurm_liquid.agent.procs import (JobRef, Process, clock_ticks, devices_cgroup, job_from_cgroup,
                                      job_from_environ, job_from_stepd_cmdline, scan, scan_files)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "procs"


def v1(step: str | None) -> JobRef:
    return JobRef(1234, step, "cgroup-v1")


def v2(step: str | None) -> JobRef:
    return JobRef(1234, step, "cgroup-v2")


CGROUP_FIXTURES = {
    "v1-step0-task": v1("0"),
    "v1-batch-freezer-only": v1("batch"),
    "v1-extern-adopted": v1("extern"),
    "v1-multi-slurmd": v1("0"),
    "v1-hybrid-step0": v1("0"),
    "v1-no-job-session": None,
    "v1-no-job-sshd": None,
    "v1-no-job-slurmd": None,
    "v1-no-job-dir-named-job": None,
    "v2-step0-task": v2("0"),
    "v2-batch": v2("batch"),
    "v2-extern-special": v2("extern"),
    "v2-stepd": v2("0"),
    "v2-multi-slurmd": v2("0"),
    "v2-interactive": v2("interactive"),
    "v2-cgroupns-host": v2("batch"),
    "v2-no-job-stepd-infra": None,
    "v2-no-job-slurmd": None,
    "v2-no-job-session": None,
    "v2-no-job-container-root": None,
    "v2-no-job-dir-named-job": None,
    "v2-no-job-user-delegated": None,
    "v2-no-job-bad-id": None,
}


def test_every_fixture_has_an_expectation():
    assert {path.stem for path in FIXTURES.glob("*.cgroup")} == set(CGROUP_FIXTURES)


@pytest.mark.parametrize("name", sorted(CGROUP_FIXTURES))
def test_job_from_cgroup_fixture(name):
    assert job_from_cgroup((FIXTURES / f"{name}.cgroup").read_text()) == CGROUP_FIXTURES[name]


@pytest.mark.parametrize("text, expected", [
    ("0::/system.slice/slurmstepd.scope/job_77\n", JobRef(77, None, "cgroup-v2")),   # job level
    ("4:freezer:/slurm/uid_0/job_9/step_4294967292\n", JobRef(9, "4294967292", "cgroup-v1")),
    ("0::/system.slice/slurmstepd.scope/job_1/step_0-x/user\n", JobRef(1, None, "cgroup-v2")),
    ("0::/system.slice/slurmstepd.scope/step_0/user/task_0\n", None),       # no job directory
    ("0::/system.slice/slurmstepd.service/job_5/step_0\n", None),           # not the scope
    ("4:freezer:/slurm/job_5/step_0\n", None),                              # v1 needs uid_N
    ("0::/docker/abc/system.slice/slurmstepd.scope/job_5/step_0\n", None),  # not a systemd parent
    ("4:freezer:/slurm/uid_1/job_\u0661\u0662/step_0\n", None),             # non-ASCII digits
    ("11:memory:/slurm/uid_1/job_1234/step_0", v1("0")),                    # no final newline
    ("", None),
    ("garbage\n::\n0:\n", None),
])
def test_job_from_cgroup_edges(text, expected):
    assert job_from_cgroup(text) == expected


@given(st.text())
def test_job_from_cgroup_never_raises(text):
    result = job_from_cgroup(text)
    assert result is None or isinstance(result, JobRef)


@given(st.sampled_from(["", "/system.slice", "/system.slice/docker-0a1b.scope/system.slice"]),
       st.sampled_from(["slurmstepd.scope", "gpu01_slurmstepd.scope"]),
       st.integers(min_value=1, max_value=2**32 - 1),   # uint32
       st.sampled_from(["0", "17", "batch", "extern", "interactive"]),
       st.sampled_from(["/user/task_0", "/user/task_special", "/slurm", ""]))
def test_job_from_cgroup_v2_reads_any_generated_layout(prefix, scope, job_id, step, tail):
    text = f"0::{prefix}/{scope}/job_{job_id}/step_{step}{tail}\n"
    assert job_from_cgroup(text) == JobRef(job_id, step, "cgroup-v2")


@given(st.binary())
def test_byte_parsers_never_raise(data):
    assert job_from_stepd_cmdline(data) is None or job_from_stepd_cmdline(data).via == "slurmstepd"
    assert job_from_environ(data) is None or job_from_environ(data).via == "environ"


@pytest.mark.parametrize("cmdline, expected", [
    (b"slurmstepd: [1234.batch]\0", JobRef(1234, "batch", "slurmstepd")),
    (b"slurmstepd: [1234.0]\0", JobRef(1234, "0", "slurmstepd")),
    (b"slurmstepd: [1234.extern]\0", JobRef(1234, "extern", "slurmstepd")),
    (b"slurmstepd: [1234.0]" + b"\0" * 40, JobRef(1234, "0", "slurmstepd")),   # padded title
    (b"slurmstepd: [1234.3+1]\0", JobRef(1234, "3", "slurmstepd")),            # het component
    (b"/usr/sbin/slurmstepd\0", None),          # before it sets its title
    (b"slurmstepd: [abc.0]\0", None),
    (b"bash\0-c\0slurmstepd: [1234.0]\0", None),  # the title must be argv[0]
    (b"", None),
])
def test_job_from_stepd_cmdline(cmdline, expected):
    assert job_from_stepd_cmdline(cmdline) == expected


@pytest.mark.parametrize("data, expected", [
    (b"PATH=/bin\0SLURM_JOB_ID=77\0SLURM_STEP_ID=0\0", JobRef(77, "0", "environ")),
    (b"SLURM_JOB_ID=77\0", JobRef(77, None, "environ")),
    (b"SLURM_JOB_ID=77\0SLURM_JOB_ID=88\0", JobRef(77, None, "environ")),   # getenv(): the first
    (b"X=SLURM_JOB_ID=5\0", None),
    (b"SLURM_JOB_ID=\0", None),
    (b"SLURM_JOB_ID=12a\0", None),
    (b"SLURM_JOBS=3\0", None),
    (b"", None),
])
def test_job_from_environ(data, expected):
    assert job_from_environ(data) == expected


def test_clock_ticks_is_positive():
    assert clock_ticks() > 0


# --- scan() over a fake /proc ------------------------------------------------------------------

def env(**values: str) -> bytes:
    return b"".join(f"{key}={value}\0".encode() for key, value in values.items())


def add(root: Path, pid: int, *, comm: str = "python", ppid: int = 1, uid: int = 1001,
        cgroup: str = "0::/user.slice/user-1001.slice/session-3.scope\n", cmdline: bytes = b"",
        environ: bytes = b"", rss_kib: int | None = 2048, utime: int = 30, stime: int = 12,
        flags: int = 0x400000) -> Path:
    """One /proc/<pid> directory as Linux writes it (stat fields per proc(5))."""
    d = root / str(pid)
    d.mkdir()
    (d / "stat").write_bytes(
        f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1 {flags} 812 0 0 0 {utime} {stime} 0 0 20 0 1 0 "
        f"4711 123456 {(rss_kib or 0) // 4} 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0"
        .encode())
    rss = f"VmRSS:\t{rss_kib:8d} kB\n" if rss_kib is not None else ""
    (d / "status").write_text(
        f"Name:\t{comm[:15]}\nState:\tS (sleeping)\nTgid:\t{pid}\nPid:\t{pid}\nPPid:\t{ppid}\n"
        f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\n{rss}Threads:\t1\n")
    (d / "cgroup").write_text(cgroup)
    (d / "cmdline").write_bytes(cmdline or comm.encode() + b"\0")
    (d / "environ").write_bytes(environ)
    return d


NO_CGROUP = "0::/\n"   # proctrack/linuxproc inside a container: the cgroup says nothing


@pytest.fixture
def proc(tmp_path) -> Path:
    root = tmp_path / "proc"
    root.mkdir()
    add(root, 1, comm="systemd", ppid=0, uid=0, cgroup="0::/init.scope\n")
    (root / "self").symlink_to("1")        # non-numeric entries of the real /proc
    (root / "meminfo").write_text("MemTotal: 1 kB\n")
    return root


def stepd(root: Path, pid: int, job: str, *, ppid: int = 1, uid: int = 0) -> None:
    add(root, pid, comm="slurmstepd", ppid=ppid, uid=uid, cgroup=NO_CGROUP,
        cmdline=f"slurmstepd: [{job}]".encode() + b"\0")


def test_scan_cgroup_wins_over_environ(proc):
    add(proc, 100, cgroup="0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n",
        environ=env(SLURM_JOB_ID="999"))
    assert scan(proc)[100].job == JobRef(1234, "0", "cgroup-v2")


def test_scan_maps_through_two_levels_to_a_root_slurmstepd(proc):
    stepd(proc, 50, "1234.batch")
    add(proc, 51, comm="bash", ppid=50, cgroup=NO_CGROUP, environ=env(SLURM_JOB_ID="999"))
    add(proc, 52, comm="torchrun", ppid=51, cgroup=NO_CGROUP)
    add(proc, 53, comm="python", ppid=52, cgroup=NO_CGROUP)
    found = scan(proc)
    assert set(found) == {51, 52, 53}
    assert {p.job for p in found.values()} == {JobRef(1234, "batch", "slurmstepd")}


def test_scan_does_not_trust_a_user_owned_slurmstepd(proc):
    stepd(proc, 60, "666.0", uid=1001)                 # a user's process renamed to slurmstepd
    add(proc, 61, ppid=60, cgroup=NO_CGROUP, environ=env(SLURM_JOB_ID="4321"))
    add(proc, 62, ppid=60, cgroup=NO_CGROUP)
    found = scan(proc)
    assert found[61].job == JobRef(4321, None, "environ")
    assert 62 not in found
    assert 60 not in found        # nothing ties the impostor itself to a job either


def test_scan_passes_a_fake_slurmstepd_on_to_the_real_one_above(proc):
    stepd(proc, 70, "1234.0")
    stepd(proc, 71, "666.0", ppid=70, uid=1001)
    add(proc, 72, ppid=71, cgroup=NO_CGROUP)
    found = scan(proc)
    assert found[72].job == JobRef(1234, "0", "slurmstepd")
    assert found[71].job == JobRef(1234, "0", "slurmstepd")    # the fake one is the job's own


def test_scan_environ_fallback_is_marked(proc):
    add(proc, 80, cgroup=NO_CGROUP, environ=env(SLURM_JOB_ID="4321", SLURM_STEP_ID="2"))
    assert scan(proc)[80].job == JobRef(4321, "2", "environ")


def test_scan_leaves_out_processes_of_no_job(proc):
    add(proc, 90, comm="sshd", uid=0, cgroup="0::/system.slice/sshd.service\n",
        environ=env(PATH="/usr/bin"))
    add(proc, 91, comm="bash", ppid=90, cgroup="0::/user.slice/user-1001.slice/job_5\n")
    assert scan(proc) == {}


def test_scan_leaves_out_slurmstepd_itself(proc):
    add(proc, 40, comm="slurmstepd", uid=0,
        cgroup="0::/system.slice/slurmstepd.scope/job_1234/step_0/slurm\n",
        cmdline=b"slurmstepd: [1234.0]\0", environ=env(SLURM_JOB_ID="1234"))
    add(proc, 41, ppid=40, cgroup="0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n")
    assert set(scan(proc)) == {41}


def test_scan_leaves_out_kernel_threads(proc):
    add(proc, 2, comm="kthreadd", ppid=0, uid=0, rss_kib=None, flags=0x208040,
        cgroup="0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n")
    assert scan(proc) == {}


def test_scan_parses_comm_with_spaces_and_parens(proc):
    comm = "my (evil)) job"
    add(proc, 100, comm=comm, cgroup="4:freezer:/slurm/uid_1001/job_7/step_0\n",
        utime=1000, stime=234, rss_kib=51200)
    (process,) = scan(proc).values()
    assert process == Process(pid=100, uid=1001, comm=comm, job=JobRef(7, "0", "cgroup-v1"),
                              rss_kib=51200, cpu_ticks=1234, devices_cgroup="")


def test_scan_zombie_has_no_rss(proc):
    add(proc, 100, cgroup="4:freezer:/slurm/uid_1001/job_7/step_0\n", rss_kib=None)
    assert scan(proc)[100].rss_kib == 0


@pytest.mark.parametrize("missing", ["stat", "status"])
def test_scan_skips_a_process_that_vanished_mid_read(proc, missing):
    job = "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n"
    (add(proc, 100, cgroup=job) / missing).unlink()
    add(proc, 101, cgroup=job)
    assert set(scan(proc)) == {101}


def test_scan_skips_unreadable_and_malformed_files(proc, monkeypatch):
    job = "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n"
    for pid in (100, 101, 102, 103):
        add(proc, pid, cgroup=job)
    (proc / "101" / "stat").write_text("101 (python) S\n")        # truncated
    (proc / "102" / "status").write_text("Name:\tpython\n")        # no Uid line
    real_read = procs._read

    def read(path: Path) -> bytes:
        if path.parent.name == "103" and path.name == "environ":
            raise ProcessLookupError(3, "No such process")
        if path.parent.name == "100" and path.name == "cgroup":
            raise PermissionError(13, "Permission denied")
        return real_read(path)

    monkeypatch.setattr(procs, "_read", read)
    # 103's environ is unreadable (no CAP_SYS_PTRACE, or it just exited): its cgroup still maps it
    assert set(scan(proc)) == {103}


def test_scan_maps_through_slurmstepd_when_environ_is_unreadable(proc):
    stepd(proc, 50, "1234.batch")
    add(proc, 51, ppid=50, cgroup=NO_CGROUP, environ=env(SLURM_JOB_GPUS="0,1"))
    (proc / "51" / "environ").unlink()
    found = scan(proc)
    assert found[51].job == JobRef(1234, "batch", "slurmstepd")


def test_scan_stops_on_an_ancestry_loop(proc):
    add(proc, 100, ppid=101, cgroup=NO_CGROUP)
    add(proc, 101, ppid=100, cgroup=NO_CGROUP)
    assert scan(proc) == {}


def test_scan_caps_the_ancestry_walk(proc):
    stepd(proc, 10, "1234.0")
    depth = procs.MAX_ANCESTRY + 5
    for pid in range(11, 11 + depth):
        add(proc, pid, ppid=pid - 1, cgroup=NO_CGROUP)
    found = scan(proc)
    # pid p starts at its parent p-1 and reaches the stepd (10) in p-10 steps
    assert set(found) == set(range(11, 11 + procs.MAX_ANCESTRY))


def test_scan_reads_each_file_once(proc, monkeypatch):
    stepd(proc, 50, "1234.0")
    parent = 50
    for pid in range(51, 251):            # a chain: every process has all others above it
        add(proc, pid, ppid=parent, cgroup=NO_CGROUP)
        parent = pid
    monkeypatch.setattr(procs, "MAX_ANCESTRY", 1000)
    reads: list[Path] = []
    real_read = procs._read
    monkeypatch.setattr(procs, "_read", lambda path: reads.append(path) or real_read(path))
    found = scan(proc)
    assert len(found) == 200 and all(p.job.via == "slurmstepd" for p in found.values())
    assert len(reads) == len(set(reads))


def test_scan_takes_nothing_but_the_job_id_from_the_environment(proc):
    # SLURM_JOB_GPUS and friends are the process's own to set: the agent does not read them
    job = "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n"
    add(proc, 100, cgroup=job, environ=env(SLURM_JOB_GPUS="0,1,2,3", SLURM_SHARDS_ON_NODE="4",
                                         SLURM_JOB_NODELIST="gpu[01-99999999]"))
    (found,) = scan(proc).values()
    assert found == Process(pid=100, uid=1001, comm="python", job=JobRef(1234, "0", "cgroup-v2"), rss_kib=2048,
                            cpu_ticks=42)


def test_scan_gives_the_devices_cgroup_of_a_v1_job(proc):
    add(proc, 100, cgroup="12:devices:/slurm/uid_1001/job_7/step_0/task_0\n4:freezer:/slurm/uid_1001/job_7/step_0\n")
    add(proc, 101, cgroup="4:freezer:/slurm/uid_1001/job_8/step_0\n3:devices:/user.slice\n")
    found = scan(proc)
    assert (found[100].devices_cgroup, found[101].devices_cgroup) == ("/slurm/uid_1001/job_7", "")


@pytest.mark.parametrize("text, expected", [
    ("12:devices:/slurm/uid_1001/job_7/step_0/task_0\n", "/slurm/uid_1001/job_7"),
    ("9:cpuset,devices:/slurm_gpu01/uid_0/job_12/step_batch\n", "/slurm_gpu01/uid_0/job_12"),
    ("12:devices:/user.slice/user-1001.slice/user@1001.service/slurm/uid_1/job_7\n", ""),  # a user subtree
    ("12:devicesx:/slurm/uid_1001/job_7\n", ""),
    ("0::/system.slice/slurmstepd.scope/job_7/step_0\n", ""),              # v2: no devices file
    ("12:devices:/slurm/uid_1/job_99999999999\n", ""),                      # not a Slurm job id
])
def test_devices_cgroup(text, expected):
    assert devices_cgroup(text) == expected


def test_a_huge_job_id_anywhere_is_nobodys_job(proc):
    # int() of a 5000-digit SLURM_JOB_ID raises ValueError: it used to end the agent's scan
    add(proc, 100, environ=env(SLURM_JOB_ID="9" * 5000))
    add(proc, 101, cgroup="0::/system.slice/slurmstepd.scope/job_" + "7" * 5000 + "/step_0\n")
    add(proc, 102, environ=env(SLURM_JOB_ID=str(2 ** 32)))
    add(proc, 103, environ=env(SLURM_JOB_ID="0"))
    assert scan(proc) == {}


def test_scan_files_is_scan_over_memory(proc):
    add(proc, 100, cgroup="4:freezer:/slurm/uid_1001/job_7/step_0\n")
    stepd(proc, 50, "1234.batch")
    add(proc, 51, ppid=50, cgroup=NO_CGROUP)
    files = {int(d.name): {f.name: f.read_bytes() for f in d.iterdir()} for d in proc.iterdir() if d.name.isdigit()}
    assert scan_files(files) == scan(proc) and set(scan(proc)) == {51, 100}


def test_scan_real_proc_does_not_raise():
    found = scan()
    assert isinstance(found, dict)
    assert all(isinstance(p, Process) and p.pid == pid for pid, p in found.items())
