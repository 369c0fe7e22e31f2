"""Per-job meters: which job is charged for which GPU memory, host memory and CPU time."""

from __future__ import annotations

import pytest

from slurm_liquid.agent.alloc import Allocation
from slurm_liquid.agent.gpus import GpuProcess, GpuSample
from slurm_liquid.agent.meter import JobMeter, Meters
from slurm_liquid.agent.procs import JobRef, Process


def proc(pid: int, job: int, rss_mib: float = 100, ticks: int = 0, uid: int = 1001,
         via: str = "slurmstepd") -> Process:
    return Process(pid=pid, uid=uid, comm="python", job=JobRef(job, "batch", via), rss_kib=int(rss_mib * 1024),
                   cpu_ticks=ticks)


def held(*gpus: int, shards: int = 0, nodelist: str = "gpu01") -> Allocation:
    """What Slurm gave a job on this node (alloc.py)."""
    return Allocation(gpus, shards, nodelist, "slurm")


def gpu(index: int, used: float, util: float | None = 50.0, procs: tuple[GpuProcess, ...] = ()) -> GpuSample:
    return GpuSample(index=index, name="NVIDIA H100", uuid=f"GPU-{index}", used_mib=used, total_mib=81559.0,
                     util=util, processes=procs)


def as_dict(*processes: Process) -> dict[int, Process]:
    return {p.pid: p for p in processes}


def test_a_gpu_held_alone_is_charged_all_its_used_memory_and_its_peak_is_kept() -> None:
    meters = Meters(ticks_per_s=100)
    procs, slurm = as_dict(proc(10, 7), proc(11, 7)), {7: held(0, 1)}
    # NVML sees the process with less than the card lost (context, allocator cache): the card counts
    meters.update(0.0, procs, [gpu(0, 30000, 90, (GpuProcess(10, 28000),)), gpu(1, 29000, 80), gpu(2, 500, 0)], slurm)
    meters.update(5.0, procs, [gpu(0, 25000, 70, (GpuProcess(10, 24000),)), gpu(1, 31000, 60), gpu(2, 500, 0)], slurm)
    usage = meters.jobs[7].usage("nvml", "gpu01")
    assert usage.gpus == 2 and usage.peak_mib == 31000       # GPU 2 is not the job's
    assert usage.util == pytest.approx(75.0)                 # GPU 0: (90+70)/2, GPU 1: (80+60)/2
    assert not usage.shared and usage.samples == 2 and usage.seconds == 5 and usage.nodes == ("gpu01",)


def test_accounting_peak_between_samples_wins_over_the_sampled_value() -> None:
    meters = Meters()
    procs = as_dict(proc(10, 7))
    meters.update(0.0, procs, [gpu(0, 20000, procs=(GpuProcess(10, 19000, peak_mib=41000.0),))], {7: held(0)})
    assert meters.jobs[7].usage("nvml-acct", "n").peak_mib == 41000


def test_a_shared_gpu_charges_each_job_its_own_processes() -> None:
    meters = Meters()
    procs = as_dict(proc(10, 7), proc(20, 8))
    sample = gpu(0, 9000, util=70, procs=(GpuProcess(10, 3000, util=20.0), GpuProcess(20, 5500, util=45.0)))
    meters.update(0.0, procs, [sample], {7: held(0, shards=4), 8: held(0, shards=8)})
    a, b = meters.jobs[7].usage("nvml", "n"), meters.jobs[8].usage("nvml", "n")
    assert (a.peak_mib, a.util, a.shared) == (3000, 20.0, True)
    assert (b.peak_mib, b.util, b.shared) == (5500, 45.0, True)


def test_a_single_shard_job_is_charged_its_own_processes_only() -> None:
    meters = Meters()
    meters.update(0.0, as_dict(proc(10, 7)), [gpu(0, 9000, procs=(GpuProcess(10, 3000),))], {7: held(0, shards=4)})
    assert meters.jobs[7].usage("nvml", "n").peak_mib == 3000 and meters.jobs[7].usage("nvml", "n").shared


def test_without_allocations_processes_of_two_jobs_on_one_gpu_make_it_shared() -> None:
    meters = Meters()
    procs = as_dict(proc(10, 7), proc(20, 8))                  # Slurm has not said whose GPU 0 is
    meters.update(0.0, procs, [gpu(0, 9000, util=None, procs=(GpuProcess(10, 3000), GpuProcess(20, 4000)))])
    assert meters.jobs[7].usage("nvml", "n").peak_mib == 3000
    assert meters.jobs[8].usage("nvml", "n").peak_mib == 4000
    assert meters.jobs[8].usage("nvml", "n").util is None      # no utilisation reading at all


def test_another_jobs_process_on_a_held_gpu_is_taken_off_the_holder_not_made_shared() -> None:
    # only where devices are not constrained can job 8 open job 7's GPU at all; it pays for its own
    # process there, and job 7 keeps the whole card less that
    meters = Meters()
    procs = as_dict(proc(10, 7), proc(20, 8, uid=1002))
    meters.update(0.0, procs, [gpu(0, 60000, procs=(GpuProcess(10, 20000), GpuProcess(20, 4000)))], {7: held(0)})
    seven, eight = meters.jobs[7].usage("nvml", "n"), meters.jobs[8].usage("nvml", "n")
    assert (seven.peak_mib, seven.shared, eight.peak_mib, eight.shared) == (56000, False, 4000, True)


def test_unreadable_readings_count_as_none() -> None:
    meters = Meters()
    nan, inf = float("nan"), float("inf")
    sample = gpu(0, nan, util=inf, procs=(GpuProcess(10, -5.0, peak_mib=nan, util=nan),))
    meters.update(0.0, as_dict(proc(10, 7)), [sample, gpu(1, inf, util=-1.0, procs=(GpuProcess(10, inf),))], {7: held(0, 1)})
    usage = meters.jobs[7].usage("nvml", "n")
    assert (usage.peak_mib, usage.util, usage.gpus) == (0, None, 2)


def test_without_gpu_readings_held_gpus_count_and_host_use_is_measured() -> None:
    meters = Meters(ticks_per_s=100)
    slurm = {7: held(2, 3)}
    meters.update(0.0, as_dict(proc(10, 7, rss_mib=1000, ticks=0), proc(11, 7, rss_mib=500, ticks=0)), [], slurm)
    meters.update(10.0, as_dict(proc(10, 7, rss_mib=3000, ticks=1500), proc(11, 7, rss_mib=500, ticks=500)), [], slurm)
    usage = meters.jobs[7].usage("none", "gpu02")
    assert (usage.gpus, usage.peak_mib, usage.host_mib) == (2, 0, 3500)
    assert usage.cpus == pytest.approx(2.0)                     # 20 s of CPU in 10 s


def test_cpu_time_before_the_agent_saw_a_process_is_not_charged() -> None:
    meters = Meters(ticks_per_s=100)
    meters.update(0.0, as_dict(proc(10, 7, ticks=10_000)), [])   # a long-running process, first sight
    meters.update(4.0, as_dict(proc(10, 7, ticks=10_400)), [])
    assert meters.jobs[7].usage("none", "n").cpus == pytest.approx(1.0)


def test_a_job_without_gpus_has_no_gpu_meters() -> None:
    meters = Meters()
    meters.update(0.0, as_dict(proc(10, 9)), [gpu(0, 100)])
    assert meters.jobs[9].gpus == {}


def test_meters_survive_a_round_trip_through_json() -> None:
    meters = Meters()
    meters.update(0.0, as_dict(proc(10, 7)), [gpu(0, 12345)], {7: held(0, nodelist="gpu[01-02]")})
    again = Meters()
    again.restore(meters.to_json())
    assert again.jobs[7] == meters.jobs[7] and isinstance(again.jobs[7], JobMeter)
    assert again.jobs[7].usage("nvml", "gpu01") == meters.jobs[7].usage("nvml", "gpu01")


def test_a_process_claiming_a_job_by_environment_counts_only_for_its_own_users_job() -> None:
    meters = Meters()
    procs = as_dict(proc(10, 7, rss_mib=100),                                         # alice's job 7
                    proc(11, 7, rss_mib=500, via="environ"),                          # alice's daemonised loader
                    proc(20, 7, rss_mib=9000, uid=1002, via="environ"),               # bob says SLURM_JOB_ID=7
                    proc(30, 9, rss_mib=9000, uid=1002, via="environ"))               # a job seen no other way
    meters.update(0.0, procs, [gpu(0, 1000, procs=(GpuProcess(20, 50000),))], {7: held(0)})
    assert set(meters.jobs) == {7}
    assert meters.jobs[7].host_peak_mib == 600
    assert meters.jobs[7].usage("nvml", "n").peak_mib == 1000    # bob's GPU process is not job 7's


def test_saved_meters_with_wrong_types_are_skipped_not_restored() -> None:
    meters = Meters()
    meters.update(0.0, as_dict(proc(10, 7)), [gpu(0, 12345)], {7: held(0)})
    saved = meters.to_json()
    bad = {"8": {**saved["7"], "job_id": 8, "host_peak_mib": "x"},
           "9": {**saved["7"], "job_id": 9, "gpus": {"0": {"peak_mib": 1e400}}},
           "10": {**saved["7"], "job_id": 11},                                   # key and id differ
           "12": {**saved["7"], "job_id": 12, "surprise": 1}, "13": [], "x": None}
    again = Meters()
    assert again.restore({**saved, **bad}) == len(bad)
    assert set(again.jobs) == {7} and again.jobs[7] == meters.jobs[7]
