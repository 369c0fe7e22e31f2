"""The Hugging Face and Lightning callbacks, driven through each library's callback protocol on CPU.

Hugging Face: the real TrainerCallback, TrainerState, TrainerControl, TrainingArguments and the
Trainer's own CallbackHandler with its DefaultFlowCallback (transformers imports without torch);
`hf_train` replays the calls Trainer._inner_training_loop / _run_epoch / _maybe_log_save_evaluate make
(transformers 5.25), with a checkpoint folder written where Trainer._save_checkpoint writes it.

Lightning needs torch, so its callback is built on a stand-in of lightning.pytorch.Callback whose hooks
have the signatures of Lightning 2.x (mirrored from
https://github.com/Lightning-AI/pytorch-lightning/blob/759eefc3ed1ffc3e4623f9e4cf72c766dd74c252/src/lightning/pytorch/callbacks/callback.py,
the same from 2.0 to 2.5), driven by a stand-in fit loop with Lightning's order of calls.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_liquid import progress
from slurm_liquid.integrations import _common
from slurm_liquid.integrations._common import batch_len, resume_checkpoint, wait_for_requeue
from slurm_liquid.integrations._lightning_callback import callback_class
from slurm_liquid.progress import Reporter
from tests.unit.test_progress import JOB, Clock, job, signals, written  # noqa: F401 - fixtures

try:  # the `test` extra installs transformers, which imports without torch
    from transformers import TrainerControl, TrainerState, TrainingArguments
    from transformers.trainer_callback import CallbackHandler, DefaultFlowCallback

    from slurm_liquid.integrations.huggingface import LiquidCallback as HFCallback
except ImportError:
    HFCallback = None
needs_transformers = pytest.mark.skipif(HFCallback is None, reason="transformers is not installed")

ROOT = Path(__file__).resolve().parents[2]


class Sleeper:
    """A fake time.sleep that moves the fake clock, and notes what SIGTERM does while it waits."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.slept, self.sigterm = clock, 0.0, set()

    def __call__(self, seconds: float) -> None:
        self.sigterm.add(signal.getsignal(signal.SIGTERM))
        self.slept += seconds
        self.clock.now += seconds


def sigusr1() -> None:
    os.kill(os.getpid(), signal.SIGUSR1)


# -- imports --------------------------------------------------------------------------------------

def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)


def test_the_package_imports_no_training_library() -> None:
    done = run_python("import sys, slurm_liquid.integrations\n"
                      "print(sorted(m for m in ('torch', 'transformers', 'lightning', 'pytorch_lightning')"
                      " if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("module, blocked, named", [
    ("huggingface", ["transformers"], "`transformers`"),
    ("lightning", ["lightning", "pytorch_lightning"], "PyTorch Lightning"),
])
def test_a_missing_library_is_named_in_one_import_error(module, blocked, named) -> None:
    block = "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)  # None: import raises ImportError
    done = run_python(f"import sys\n{block}"
                      f"try:\n    import slurm_liquid.integrations.{module}\n"
                      "except ImportError as err:\n    print('ImportError:', err)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ImportError: ") and named in done.stdout and "pip install" in done.stdout


# -- Hugging Face ---------------------------------------------------------------------------------

def hf_args(tmp_path, **extra) -> TrainingArguments:
    options = dict(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, gradient_accumulation_steps=2,
                   max_steps=20, save_strategy="no", logging_strategy="no", report_to="none")
    return TrainingArguments(**{**options, **extra})


def hf_train(callback, args, *, state=None, clock, step_s=0.5, steps_in_epoch=10, signal_at=(), after_step=None):
    """One `trainer.train()`, with the callback calls in the Trainer's order. Returns the final state."""
    handler = CallbackHandler([DefaultFlowCallback, callback], None, None, None, None)
    state = state or TrainerState()
    state.max_steps, state.is_world_process_zero = args.max_steps, True
    state.compute_steps(args, args.max_steps)  # logging, eval and save steps, as Trainer._init_training_state
    control = TrainerControl()
    epochs = -(-args.max_steps // steps_in_epoch)

    def maybe_save(control):
        if control.should_save:  # Trainer._save_checkpoint, then on_save
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            folder.mkdir(parents=True, exist_ok=True)
            state.save_to_json(str(folder / "trainer_state.json"))
            control = handler.on_save(args, state, control)
        return control

    control = handler.on_train_begin(args, state, control)
    for epoch in range(state.global_step // steps_in_epoch, epochs):
        control = handler.on_epoch_begin(args, state, control)
        for step in range(state.global_step % steps_in_epoch, steps_in_epoch):
            control = handler.on_step_begin(args, state, control)
            clock.now += step_s
            if state.global_step + 1 in signal_at:
                sigusr1()
            state.global_step += 1
            state.epoch = epoch + (step + 1) / steps_in_epoch
            control = handler.on_step_end(args, state, control)
            if control.should_evaluate:  # Trainer._evaluate; with save_strategy "best": save if a new best
                control = handler.on_evaluate(args, state, control, metrics={"eval_loss": 1.0})
                if args.save_strategy == "best":
                    control.should_save = False  # never a new best here
            control = maybe_save(control)
            if after_step:
                after_step(state)
            if control.should_epoch_stop or control.should_training_stop:
                break
        control = handler.on_epoch_end(args, state, control)
        control = maybe_save(control)
        if control.should_training_stop:
            break
    handler.on_train_end(args, state, control)
    return state


@needs_transformers
def test_hf_reports_step_total_epoch_and_its_own_measured_rate(job, signals, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")  # args.world_size needs torch; the launcher's variable stands in
    clock = Clock()
    callback = HFCallback(reporter=Reporter(clock=clock), clock=clock)
    seen = []
    hf_train(callback, hf_args(tmp_path), clock=clock, after_step=lambda state: seen.append(written(job)))
    # The first report at the start, then one per 5 s of the fake clock: 10 steps of 0.5 s.
    assert [r["step"] for r in seen[:9]] == [0] * 9 and seen[9]["step"] == 10
    # 4 per device x 2 accumulation x 2 processes = 16 samples per 0.5 s step; the window opens at step 1.
    assert seen[9]["samples_per_s"] == pytest.approx(32.0)
    assert (seen[9]["total"], seen[9]["epoch"]) == (20, 1)
    final = written(job)
    assert (final["step"], final["total"], final["epoch"], final["checkpoint"]) == (20, 20, 2, None)
    assert final["samples_per_s"] is None  # the final report is forced, no rate


@needs_transformers
def test_hf_signal_saves_reports_stops_then_resumes_after_a_resize(job, signals, tmp_path, monkeypatch) -> None:
    clock = Clock()
    sleeper = Sleeper(clock)
    args = hf_args(tmp_path)
    first = HFCallback(reporter=Reporter(clock=clock), clock=clock, sleep=sleeper, requeue_wait_s=30)
    state = hf_train(first, args, clock=clock, signal_at={7})
    saved = Path(args.output_dir) / "checkpoint-7"
    assert state.global_step == 7 and saved.is_dir()         # the Trainer saved at the signal's step, and stopped
    report = written(job)
    assert (report["step"], report["checkpoint"], report["checkpoint_step"]) == (7, str(saved), 7)
    assert not (Path(args.output_dir) / "checkpoint-8").exists()
    # It waited for the requeue with SIGTERM's default action (Slurm's SIGTERM ends it), then gave up.
    assert sleeper.slept == pytest.approx(30) and sleeper.sigterm == {signal.SIG_DFL}
    assert not progress.checkpoint_requested()

    # Requeued onto one node with 2 GPUs: a new process resumes from the reported checkpoint.
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    assert resume_checkpoint() == str(saved)
    resumed = TrainerState.load_from_json(str(saved / "trainer_state.json"))  # what train(resume_from_checkpoint=)
    second = HFCallback(reporter=Reporter(clock=clock), clock=clock, sleep=sleeper)
    state = hf_train(second, args, state=resumed, clock=clock)
    final = written(job)
    assert state.global_step == 20
    assert (final["step"], final["gpus"], final["nodes"], final["checkpoint"]) == (20, 2, 1, str(saved))
    assert sleeper.slept == pytest.approx(30)  # a completed training does not wait


@needs_transformers
def test_hf_checkpoints_the_trainer_saves_itself_are_reported_without_stopping(job, signals, tmp_path) -> None:
    clock = Clock()
    args = hf_args(tmp_path, save_strategy="steps", save_steps=5)
    seen = []
    state = hf_train(HFCallback(reporter=Reporter(clock=clock), clock=clock), args, clock=clock,
                     after_step=lambda state: seen.append(written(job)["checkpoint"]))
    assert state.global_step == 20
    assert seen[4] == seen[8] == str(Path(args.output_dir) / "checkpoint-5")
    assert seen[19] == str(Path(args.output_dir) / "checkpoint-20")


@needs_transformers
def test_hf_a_request_dropped_by_save_strategy_best_is_made_again(job, signals, tmp_path) -> None:
    clock = Clock()
    args = hf_args(tmp_path, save_strategy="best", metric_for_best_model="eval_loss", eval_strategy="steps",
                   eval_steps=2)
    callback = HFCallback(reporter=Reporter(clock=clock), clock=clock, sleep=Sleeper(clock), requeue_wait_s=1)
    state = hf_train(callback, args, clock=clock, signal_at={6})
    assert state.global_step == 7 and written(job)["checkpoint"] == str(Path(args.output_dir) / "checkpoint-7")


@needs_transformers
def test_hf_says_how_to_resume_when_training_restarts_from_zero(job, signals, tmp_path, capsys) -> None:
    Reporter().report(7, 20, checkpoint=str(tmp_path))
    clock = Clock()
    hf_train(HFCallback(reporter=Reporter(clock=clock), clock=clock), hf_args(tmp_path, max_steps=2), clock=clock)
    err = capsys.readouterr().err
    assert "checkpoint at step 7" in err and "resume_from_checkpoint=slurm_liquid.integrations.huggingface" in err


@needs_transformers
def test_hf_training_goes_on_when_reports_cannot_be_written(job, signals, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv(progress.DIR_ENV, str(tmp_path / "missing" / "dir"))
    clock = Clock()
    callback = HFCallback(reporter=Reporter(clock=clock), clock=clock, sleep=Sleeper(clock), requeue_wait_s=5)
    state = hf_train(callback, hf_args(tmp_path), clock=clock, step_s=3.0, signal_at={11})
    assert state.global_step == 11                          # saved and stopped; nothing raised
    assert (Path(tmp_path) / "out" / "checkpoint-11").is_dir()
    assert capsys.readouterr().err.count("cannot report progress") == 1


@needs_transformers
def test_hf_outside_slurm_trains_without_waiting(signals, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    clock = Clock()
    sleeper = Sleeper(clock)
    state = hf_train(HFCallback(clock=clock, sleep=sleeper), hf_args(tmp_path), clock=clock, signal_at={3})
    assert state.global_step == 3 and sleeper.slept == 0


# -- Lightning (stand-in protocol) ----------------------------------------------------------------

class StandInCallback:
    """lightning.pytorch.Callback's hooks used here, with Lightning 2.x's signatures (no-ops)."""

    def on_train_start(self, trainer, pl_module) -> None: ...
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None: ...
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None: ...
    def on_train_epoch_end(self, trainer, pl_module) -> None: ...
    def on_validation_end(self, trainer, pl_module) -> None: ...
    def on_train_end(self, trainer, pl_module) -> None: ...


class Tensor:
    def __init__(self, *shape: int) -> None:
        self.shape = shape


class Strategy:
    """reduce_boolean_decision(decision, all=True) of Lightning 2.x; `others` are the other ranks' votes."""

    def __init__(self) -> None:
        self.others: list[bool] = []
        self.calls: list[tuple[bool, bool]] = []

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:  # noqa: A002 - Lightning's name
        self.calls.append((decision, all))
        votes = [decision, *self.others]
        return all_(votes) if all else any(votes)


all_ = all


class StandInTrainer:
    """The Trainer attributes the callback reads, and fit()'s order of hook calls (automatic optimization:
    global_step grows at each optimizer step, before on_train_batch_end)."""

    def __init__(self, root: Path, callbacks, *, max_steps=20, accumulate=1, batches_per_epoch=10,
                 world_size=2, clock: Clock, step_s=0.25) -> None:
        self.default_root_dir, self.callbacks, self.max_steps = str(root), callbacks, max_steps
        self.accumulate_grad_batches, self.batches_per_epoch, self.world_size = accumulate, batches_per_epoch, world_size
        self.clock, self.step_s = clock, step_s
        self.global_step, self.current_epoch, self.is_global_zero, self.should_stop = 0, 0, True, False
        self.checkpoint_callback = None
        self.strategy = Strategy()
        self.saved: list[str] = []
        self.estimated_stepping_batches = max_steps

    def save_checkpoint(self, path) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"global_step": self.global_step, "epoch": self.current_epoch}))
        self.saved.append(str(path))

    def fit(self, ckpt_path=None, signal_at=(), batch=None) -> None:
        if ckpt_path:
            state = json.loads(Path(ckpt_path).read_text())
            self.global_step, self.current_epoch = state["global_step"], state["epoch"]
        batch = batch if batch is not None else {"input_ids": Tensor(8, 128), "labels": [Tensor(8)]}
        for cb in self.callbacks:
            cb.on_train_start(self, None)
        batch_idx = (self.global_step * self.accumulate_grad_batches) % self.batches_per_epoch
        while self.global_step < self.max_steps and not self.should_stop:
            for cb in self.callbacks:
                cb.on_train_batch_start(self, None, batch, batch_idx)
            self.clock.now += self.step_s
            if (batch_idx + 1) % self.accumulate_grad_batches == 0:
                self.global_step += 1
                if self.global_step in signal_at:
                    sigusr1()
            for cb in self.callbacks:
                cb.on_train_batch_end(self, None, {"loss": 0.0}, batch, batch_idx)
            batch_idx += 1
            if batch_idx == self.batches_per_epoch:
                for cb in self.callbacks:
                    cb.on_train_epoch_end(self, None)
                batch_idx, self.current_epoch = 0, self.current_epoch + 1
        for cb in self.callbacks:
            cb.on_train_end(self, None)


LightningCallback = callback_class(StandInCallback)


def test_lightning_reports_and_measures_samples_per_second(job, signals, tmp_path) -> None:
    clock = Clock()
    callback = LightningCallback(tmp_path / "ckpt", reporter=Reporter(clock=clock), clock=clock)
    trainer = StandInTrainer(tmp_path, [callback], clock=clock, max_steps=40, accumulate=2, batches_per_epoch=20)
    trainer.fit()
    assert isinstance(callback, StandInCallback)
    assert trainer.global_step == 40 and not trainer.saved
    final = written(job)
    assert (final["step"], final["total"], final["epoch"]) == (40, 40, 4)


def test_lightning_rate_in_the_report(job, signals, tmp_path) -> None:
    clock = Clock()
    callback = LightningCallback(tmp_path / "ckpt", reporter=Reporter(clock=clock), clock=clock)
    trainer = StandInTrainer(tmp_path, [callback], clock=clock, max_steps=30, step_s=0.25)
    seen = []
    original = callback.on_train_batch_end

    def spy(*a):
        original(*a)
        seen.append(written(job))
    callback.on_train_batch_end = spy
    trainer.fit()
    # Written at the start, then after 5 s: 20 batches of 0.25 s. 8 samples per batch (read off the first
    # tensor of the batch) x 2 processes per 0.25 s = 64 samples/s.
    second = next(r for r in seen if r["step"] > 0)
    assert second["step"] == 20 and second["samples_per_s"] == pytest.approx(64.0)


def test_lightning_signal_on_another_rank_saves_stops_and_resumes_after_a_resize(job, signals, tmp_path,
                                                                                   monkeypatch) -> None:
    clock = Clock()
    sleeper = Sleeper(clock)
    callback = LightningCallback(tmp_path / "ckpt", reporter=Reporter(clock=clock), clock=clock, sleep=sleeper,
                                 requeue_wait_s=20)
    trainer = StandInTrainer(tmp_path, [callback], clock=clock, accumulate=2)
    # The signal reaches only another rank: this one learns of it through the all-ranks decision.
    real = trainer.strategy.reduce_boolean_decision

    def other_rank_signalled(decision, all=True):  # noqa: A002
        trainer.strategy.others = [trainer.global_step >= 6]
        return real(decision, all=all)
    trainer.strategy.reduce_boolean_decision = other_rank_signalled
    trainer.fit()
    path = str(tmp_path / "ckpt" / f"slurm-liquid-{JOB}-step6.ckpt")
    assert trainer.saved == [path] and trainer.should_stop and trainer.global_step == 6
    # Asked once per optimizer step (not per accumulated batch), as "any rank", on every rank.
    assert len(trainer.strategy.calls) == 6 and {a for _, a in trainer.strategy.calls} == {False}
    report = written(job)
    assert (report["step"], report["checkpoint"], report["checkpoint_step"]) == (6, path, 6)
    assert sleeper.slept == pytest.approx(20) and sleeper.sigterm == {signal.SIG_DFL}

    # Requeued onto 1 node x 2 GPUs; signalled again at step 9 (this rank), then runs to the end.
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    assert resume_checkpoint() == path
    callback = LightningCallback(tmp_path / "ckpt", reporter=Reporter(clock=clock), clock=clock, sleep=sleeper,
                                 requeue_wait_s=20)
    trainer = StandInTrainer(tmp_path, [callback], clock=clock, accumulate=2)
    trainer.fit(ckpt_path=resume_checkpoint(), signal_at={9})
    second = str(tmp_path / "ckpt" / f"slurm-liquid-{JOB}-step9.ckpt")
    assert trainer.saved == [second] and written(job)["checkpoint"] == second
    assert not os.path.exists(path)      # the one no report names any more is removed
    assert written(job)["gpus"] == 2

    callback = LightningCallback(tmp_path / "ckpt", reporter=Reporter(clock=clock), clock=clock, sleep=sleeper)
    trainer = StandInTrainer(tmp_path, [callback], clock=clock, accumulate=2)
    trainer.fit(ckpt_path=resume_checkpoint())
    final = written(job)
    assert (final["step"], final["total"], final["checkpoint"]) == (20, 20, second)
    assert os.path.exists(second)


def test_lightning_a_failed_save_still_stops_and_is_not_reported(job, signals, tmp_path, capsys) -> None:
    clock = Clock()
    callback = LightningCallback(tmp_path / "ckpt", reporter=Reporter(clock=clock), clock=clock,
                                 sleep=Sleeper(clock), requeue_wait_s=1)
    trainer = StandInTrainer(tmp_path, [callback], clock=clock)

    def full_disk(path):
        raise OSError(28, "No space left on device")
    trainer.save_checkpoint = full_disk
    trainer.fit(signal_at={4})
    assert trainer.should_stop and trainer.global_step == 4 and written(job)["checkpoint"] is None
    assert "cannot save the checkpoint" in capsys.readouterr().err


def test_lightning_default_folder_is_the_model_checkpoints(job, signals, tmp_path) -> None:
    clock = Clock()
    callback = LightningCallback(reporter=Reporter(clock=clock), clock=clock, sleep=Sleeper(clock), requeue_wait_s=0)
    trainer = StandInTrainer(tmp_path, [callback], clock=clock)
    trainer.fit(signal_at={2})
    assert trainer.saved == [str(tmp_path / "checkpoints" / f"slurm-liquid-{JOB}-step2.ckpt")]


# -- shared parts ---------------------------------------------------------------------------------

def test_batch_len_reads_the_first_tensor() -> None:
    assert batch_len(Tensor(8, 3)) == 8
    assert batch_len({"mask": [], "x": (Tensor(5),)}) == 5
    assert batch_len([["a"], 3]) is None and batch_len(Tensor()) is None


def test_resume_checkpoint_ignores_a_checkpoint_that_is_gone(job, capsys) -> None:
    Reporter().report(3, checkpoint="/nowhere/ckpt")
    assert resume_checkpoint() is None
    assert "does not exist here" in capsys.readouterr().err


def test_no_requeue_wait_outside_slurm(monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    clock = Clock()
    sleeper = Sleeper(clock)
    wait_for_requeue(60, clock=clock, sleep=sleeper)
    assert sleeper.slept == 0


def test_the_requeue_wait_restores_sigterm(job) -> None:
    before = signal.getsignal(signal.SIGTERM)
    clock = Clock()
    sleeper = Sleeper(clock)
    wait_for_requeue(2.5, clock=clock, sleep=sleeper)
    assert sleeper.slept == pytest.approx(2.5) and sleeper.sigterm == {signal.SIG_DFL}
    assert signal.getsignal(signal.SIGTERM) == before


def test_quietly_keeps_training_going(job, capsys) -> None:
    for _ in range(2):
        with _common.quietly("thing"):
            raise RuntimeError("boom")
    assert capsys.readouterr().err.count("thing failed (RuntimeError: boom)") == 1
