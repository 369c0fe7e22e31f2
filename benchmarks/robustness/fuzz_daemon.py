"""Generated hostile inputs for the ledger codecs, the job-spec parsers, progress reports, the config
file, and the daemon's placement pass and elastic slot (see fuzz.py, which runs every area's CASES).

Each case draws one input from a Random and feeds it to one part; the project's own error type is a
clear answer (returned), anything else propagates and is counted as a traceback."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from slurm_liquid.config import parse as parse_config  # noqa: E402
from slurm_liquid.daemon.admit import Admitter  # noqa: E402
from slurm_liquid.daemon.elastic import Adjuster  # noqa: E402
from slurm_liquid.daemon.journal import Journal  # noqa: E402
from slurm_liquid.errors import LiquidError  # noqa: E402
from slurm_liquid.jobspec import parse_comment, parse_directives, parse_script  # noqa: E402
from slurm_liquid.ledger import Placed, Record, Tag, Usage, opted_in, parse_placed  # noqa: E402
from slurm_liquid.progress import Progress  # noqa: E402
from tests.unit.hostile_daemon import NOW, WORDS, _random_job, _random_text, healthy_held, random_report  # noqa: E402
from tests.unit.test_daemon_fuzz import CONFIG, TOPOLOGY, Client  # noqa: E402

DIRECTIVE_WORDS = ["model=resnet50", "batch-size=32", "batch-size=1e400", "elastic=1:8", "elastic=9:1", "signal=USR1@99999",
                   "precision=amp", "'", '"', "\\", "#LIQUID", "#SBATCH --gres=gpu:4", "python train.py --bs 64",
                   "--per_device_train_batch_size 8", "$BS", "epochs=x", "=", "gpus=99999999999999999999"]


def _script(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(0, 12)):
        words = [rng.choice(DIRECTIVE_WORDS + WORDS) for _ in range(rng.randint(0, 6))]
        lines.append(" ".join(words) + rng.choice(["", " \\", "'"]))
    if rng.random() < 0.05:
        lines.append("python x.py '" + "a " * rng.randint(1000, 200000))
    return "\n".join(lines)


def _clear(action: Callable[[], object]) -> object:
    try:
        return action()
    except LiquidError:
        return None


def ledger(rng: random.Random) -> None:
    text = _random_text(rng)
    Tag.parse(text)
    Record.parse(text)
    Usage.parse(text)
    Record.of_comment(text).with_fields(note=text).render()
    opted_in(text, text)
    _clear(lambda: parse_placed(text))
    _clear(lambda: Placed.parse(text))


def jobspec(rng: random.Random) -> None:
    script = _script(rng)
    _clear(lambda: parse_script(script))
    _clear(lambda: parse_directives(script))
    _clear(lambda: parse_comment("liquid: " + script.replace("\n", " ")))


def progress(rng: random.Random) -> None:
    Progress.of(random_report(rng)).remaining


def config(rng: random.Random) -> None:
    keys = ["lease_s", "poll_s", "mode", "max_grace_s", "slurm_timeout_s", "stall_after_s", "policy"]
    values = ["1e400", "inf", "nan", "-1", "99999999999999999999", '"enforce"', '"x"', "true", "[]", "{}", "3"]
    body = "".join(f"[{rng.choice(['daemon', 'elastic', 'submit', 'x'])}]\n{rng.choice(keys)} = {rng.choice(values)}\n"
                   for _ in range(rng.randint(1, 4)))
    _clear(lambda: parse_config(body))


def daemon_pass(rng: random.Random) -> None:
    jobs = [healthy_held(1), *(_random_job(rng) for _ in range(rng.randint(0, 10)))]
    Admitter(Client(jobs), CONFIG, TOPOLOGY, now=lambda: NOW).run_pass()


def elastic_slot(rng: random.Random) -> None:
    jobs = [_random_job(rng) for _ in range(rng.randint(1, 8))]
    for i, job in enumerate(jobs):   # some of them elastic and placed by the daemon, as a tag says
        if rng.random() < 0.5:
            from dataclasses import replace
            jobs[i] = replace(job, state="RUNNING", admin_comment=f"liquid/1 state=placed placed=gpu01:1 at=1 "
                              f"elastic=1:{rng.choice([1, 4, 64, 99999])} sig=USR1 grace={rng.choice([0, 60, 99999])}")
    reports = [random_report(rng) for _ in range(3)]
    work = Adjuster(Client(jobs), CONFIG, TOPOLOGY, Journal(":memory:", now=lambda: NOW),
                    progress=lambda job: reports[job.job_id % 3], now=lambda: NOW)
    work.run_slot()
    work.resizer.step()


CASES: list[tuple[str, Callable[[random.Random], object]]] = [
    ("ledger codecs", ledger), ("job spec parsers", jobspec), ("progress reports", progress),
    ("config file", config), ("daemon pass", daemon_pass), ("elastic slot", elastic_slot),
]
