"""Training the PS/worker DL2 of the paper replica: supervised warm-up on a teacher's decisions,
then DAgger rounds (`benchmarks/dl2/paper.py --train`).

The teacher (the artifact's DRF, its Optimus, DRF's task counts with the best split, or `hull`,
whose steps are imitated in the order it takes them) runs on a shadow of each slot; its decisions
are turned into this action space and reached on the real slot, under the same placement as the
run (`slurm_liquid.psworld.slot`). `LabelledByTeacher` is DAgger: the teacher's decisions on the
slots the student reached. Which teacher, which placement and which candidate file is shipped are
chosen on the validation traces only (`benchmarks/dl2/paper.py`: seeds 5000-5007), never on the
held-out traces (10000-10007); training uses seeds below 5000.
"""

from __future__ import annotations

from typing import Sequence

from slurm_liquid.policy.dl2.agent import Step
from slurm_liquid.policy.dl2.net import Params
from slurm_liquid.policy.dl2.psworker import PSState, PSWorkerDL2, new_psworker_params
from slurm_liquid.psworld.run import TraceRun
from slurm_liquid.psworld.slot import PLACEMENT, Slot, assign_bundles, next_role
from slurm_liquid.psworld.world import paper_trace


def next_action(state: PSState, targets: dict[str, tuple[int, int]]) -> int:
    """The next action toward every window job's (PS, workers) target: a bundle while both fall
    short, else the short role, for the job of least dominant share (DRF's water-filling order, ties
    to the earliest); stop once no job short of its target can take a task."""
    valid = state.valid()
    short = []
    for job in state.jobs:
        want_ps, want_w = targets.get(job.id, (job.ps, job.workers))
        role = ("bundle" if job.ps < want_ps and job.workers < want_w else
                "ps" if job.ps < want_ps else "worker" if job.workers < want_w else None)
        a = None if role is None else state.action_of(job, role)
        if a is not None and valid[a]:
            short.append((job.share(state.slot.setting.nodes), job.arrival, job.index, a))
    return min(short)[3] if short else state.rows() - 1


class Imitate:
    """Runs `teacher` on a shadow of each slot to get its (PS, workers) per job, then reaches them on
    the real slot with PS/worker actions after the bundle round, recording each decision. A teacher
    with a `plan` (`PaperHull`) is followed step by step in its own order (a bundle while both roles
    fall short, else the short one), then stops; others through `next_action`."""

    def __init__(self, teacher, window: int, steps: list[Step], slide: bool = False) -> None:
        self.teacher, self.window, self.steps, self.slide = teacher, window, steps, slide
        self.name = f"imitate-{teacher.name}"

    def reset(self) -> None:
        self.teacher.reset()

    def schedule(self, slot: Slot) -> None:
        shadow = Slot(slot.setting, slot.ts, slot.jobs, slot.placement)
        plan = self.teacher.plan(shadow) if hasattr(self.teacher, "plan") else None
        if plan is None:
            self.teacher.schedule(shadow)
            targets = {j.id: (j.ps, j.workers) for j in slot.jobs}
        for job in slot.jobs:  # the real slot is still empty
            job.ps = job.workers = 0
        assign_bundles(slot)
        state = PSState(slot, self.window, self.slide)
        deferred = list(plan or ())
        while deferred:  # once without a sliding window; with one, again for the jobs that entered it
            outside = []
            for job, ps, workers in deferred:
                while job.ps < ps or job.workers < workers:
                    action, valid = state.action_of(job, next_role(job, ps, workers)), state.valid()
                    if action is None and self.slide and any(w is job for w in state.waiting):
                        outside.append((job, ps, workers))
                    if action is None or not valid[action]:  # outside the window, or past a cap
                        break
                    self.steps.append(Step(state.matrix().copy(), valid, action))
                    if not state.apply(action):  # refused by the placement: the slot ends, as the teacher's
                        return
            deferred = outside if len(outside) < len(deferred) else []
        while True:
            valid = state.valid()
            if not valid[:-1].any():
                return
            if plan is not None:  # the teacher stops here (a stop is not legal before the first task)
                if valid[-1]:
                    self.steps.append(Step(state.matrix().copy(), valid, state.rows() - 1))
                return
            action = next_action(state, targets)
            self.steps.append(Step(state.matrix().copy(), valid, action))
            if not state.apply(action):
                return


def teacher_steps(traces: Sequence[TraceRun], teacher, window: int, slide: bool = False) -> list[Step]:
    """Decisions of `teacher` on each `TraceRun` of `traces` (under its placement), as PS/worker actions."""
    steps: list[Step] = []
    for run in traces:
        run.play(Imitate(teacher, window, steps, slide))
    return steps


class LabelledByTeacher:
    """DAgger on the replica: the student decides every slot, and the teacher's decisions on the slot
    the student reached (the jobs and progress its own earlier choices left) are recorded."""

    name = "dagger"

    def __init__(self, student: PSWorkerDL2, teacher, window: int, steps: list[Step]) -> None:
        self.student, self.imitate = student, Imitate(teacher, window, steps, student.slide)

    def reset(self) -> None:
        self.imitate.reset()

    def schedule(self, slot: Slot) -> None:
        self.imitate.schedule(Slot(slot.setting, slot.ts, slot.jobs, slot.placement))
        for job in slot.jobs:  # the teacher's counts were the shadow's
            job.ps = job.workers = 0
        self.student.schedule(slot)


def warmup(setting, teacher, seeds: Sequence[int], epochs: int = 5, hidden: int = 64, layers: int = 2,
           seed: int = 0, held_out: int = 1, window: int | None = None, dagger: int = 0,
           slide: bool = False, placement: str = PLACEMENT) -> tuple[Params, dict]:
    """Supervised warm-up on `teacher`'s decisions in the replica: traces `seeds` (the last `held_out`
    of them measure agreement only), the network seeing `window` jobs (default: the setting's); then
    `dagger` rounds, each running the student on the next two traces, adding the teacher's labels of
    the slots it reached and training 3 more epochs on everything; `slide`: a sliding window
    (`PSState`), recorded in the file as `window_slides`; every slot under `placement`, recorded as
    `placement`. Returns the weights and the metadata of a policy file."""
    from slurm_liquid.policy.dl2.train import supervised

    runs = [TraceRun(setting, paper_trace(setting, s), placement=placement) for s in seeds]
    cut = max(1, len(runs) - held_out)
    window = window or setting.window
    train = teacher_steps(runs[:cut], teacher, window, slide)
    test = teacher_steps(runs[cut:], teacher, window, slide) if len(runs) > cut else train[-2000:]
    result = supervised(new_psworker_params(hidden, layers, seed), train, test, epochs=epochs, seed=seed)
    stages, curve = [f"supervised warm-up on {teacher.name}"], list(result.curve)
    agreement = result.curve[-1]["held_out_agreement"]
    params, next_trace = result.params, max(seeds) + 1
    for round_ in range(dagger):
        traces = (next_trace, next_trace + 1)
        for s in traces:
            student = LabelledByTeacher(PSWorkerDL2(params, window, slide=slide), teacher, window, train)
            TraceRun(setting, paper_trace(setting, s), placement=placement).play(student)
        result = supervised(params, train, test, epochs=3, seed=round_)
        params, next_trace = result.params, next_trace + 2
        stages.append(f"DAgger round {round_ + 1} on traces {traces[0]}, {traces[1]} labelled by {teacher.name}")
        curve += [dict(row, dagger_round=round_ + 1) for row in result.curve]
    meta = {"window": window, "window_slides": slide, "placement": placement, "hidden": hidden, "layers": layers, "seed": seed, "action_space": "ps-worker",
            "setting": setting.name, "stages": stages,
            "training": {"teacher": teacher.name, "trace_seeds": list(seeds), "dagger_rounds": dagger,
                         "decisions": len(train), "warmup_held_out_agreement": agreement,
                         "held_out_agreement": result.curve[-1]["held_out_agreement"]},
            "curve": curve}
    return params, meta
