"""The daemon's schedule for refitting the estimator from what jobs really used ([estimate] retrain_every_h).

It runs `slurm-liquid estimate train --from-sacct --install <correction>` as a child process
(argument list, time-limited), so that scikit-learn never loads into the daemon and a slow fit never
holds up placement. The command installs the new model only if it beats the current one on held-out
jobs. "Due" is judged from the installed file's age, so a restarted daemon does not refit at once.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

from slurm_liquid.config import EstimateConfig

log = logging.getLogger(__name__)
TIMEOUT_S = 1800.0


class Retrainer:
    def __init__(self, cfg: EstimateConfig, clock: Callable[[], float] = time.time,
                 popen: Callable[..., Any] = subprocess.Popen):
        self.cfg = cfg
        self.clock = clock
        self.popen = popen
        self.child: Any = None
        self.started = 0.0
        self.tried = 0.0               # last start: a failing fit waits a whole period too
        self.output: Any = None

    @property
    def enabled(self) -> bool:
        return self.cfg.retrain_every_h > 0 and bool(self.cfg.correction)

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "slurm_liquid", "estimate"]
        if self.cfg.site:
            argv += ["--site", self.cfg.site]
        argv += ["train", "--from-sacct", "--since", f"{self.cfg.retrain_since_days}d",
                 "--install", self.cfg.correction]
        return argv + (["--allow-standin"] if self.cfg.retrain_allow_standin else [])

    def due(self, now: float) -> bool:
        period = self.cfg.retrain_every_h * 3600
        try:
            installed = os.stat(self.cfg.correction).st_mtime
        except OSError:
            installed = 0.0
        return now - max(installed, self.tried) >= period

    def tick(self) -> None:
        """Called from the daemon loop: finish a child that ended, stop one that ran too long, start one due."""
        if not self.enabled:
            return
        now = self.clock()
        if self.child is not None:
            code = self.child.poll()
            if code is None:
                if now - self.started > TIMEOUT_S:
                    self.child.kill()
                    self.child.wait()
                    log.warning("retrain: killed after %.0f s", TIMEOUT_S)
                    self.child = None
                return
            self.output.seek(0)
            out = self.output.read()
            self.output.close()
            (log.info if code == 0 else log.warning)("retrain finished (exit %d): %s", code, " | ".join(
                line.strip() for line in out.splitlines() if line.strip())[-2000:])
            self.child = None
            return
        if self.due(now):
            self.tried = self.started = now
            log.info("retrain: %s", " ".join(self.command()))
            # a file, not a pipe: a chatty child never blocks on a pipe nobody reads until it ends
            self.output = tempfile.TemporaryFile("w+")
            self.child = self.popen(self.command(), stdout=self.output, stderr=subprocess.STDOUT, text=True,
                                    stdin=subprocess.DEVNULL)
