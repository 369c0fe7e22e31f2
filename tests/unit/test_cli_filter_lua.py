"""cli_filter.lua run by Lua 5.1 (Slurm 22.05's) against a helper that fails: the job goes on as asked,
and the failure is logged through Slurm's log (slurm.log_error: the user's terminal, `sbatch: error:`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

LUA = Path(__file__).resolve().parents[2] / "etc" / "slurm" / "cli_filter.lua"


def run_filter(tmp_path: Path, helper_body: str) -> tuple[list[str], object]:
    lupa = pytest.importorskip("lupa.lua51")
    helper = tmp_path / "slurm-liquid"
    helper.write_text("#!/bin/sh\n" + helper_body)
    os.chmod(helper, 0o755)
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    logged: list[str] = []
    slurm = lua.eval("{SUCCESS = 0}")
    slurm.log_error = lambda fmt, *args: logged.append(str(fmt) % tuple(str(a) for a in args))
    slurm.log_info = slurm.log_error
    lua.globals().slurm = slurm
    # lupa's Lua has no io.popen: the same, through /bin/sh as C's popen(3) does
    make_pipe = lua.eval("function(text) return {read = function(self, fmt) return text end, "
                         "close = function(self) return true end} end")
    lua.globals().io.popen = lambda cmd, mode="r": make_pipe(subprocess.run(
        ["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30).stdout)
    source = LUA.read_text().replace('"/usr/local/bin/slurm-liquid"', f'"{helper}"')
    lua.execute(source)
    options = lua.eval('{type = "sbatch", comment = "liquid: model=resnet50", gres = "gpu:4", argv = {}}')
    assert lua.globals().slurm_cli_pre_submit(options, 0) == 0
    return logged, options


def test_a_crashing_helper_is_logged_with_its_last_error_line(tmp_path) -> None:
    logged, options = run_filter(tmp_path, "echo 'Traceback (most recent call last):' >&2\n"
                                           "echo 'ModuleNotFoundError: No module named numpy' >&2\nexit 1\n")
    assert logged == ["slurm-liquid: no advice, the job is submitted as asked: helper failed: "
                      "ModuleNotFoundError: No module named numpy"]
    assert options["gres"] == "gpu:4"   # unchanged


def test_a_silent_helper_is_logged_too(tmp_path) -> None:
    logged, _ = run_filter(tmp_path, "exit 3\n")
    assert len(logged) == 1 and "no answer within 2 s" in logged[0]


def test_a_complete_answer_is_applied_and_nothing_is_logged(tmp_path) -> None:
    logged, options = run_filter(tmp_path, "echo 'warning: slow disk' >&2\nprintf 'set gres gpu:2\\nend\\n'\n")
    assert logged == [] and options["gres"] == "gpu:2"


def test_the_last_line_of_a_long_traceback_is_the_one_logged(tmp_path) -> None:
    logged, _ = run_filter(tmp_path, "i=0; while [ $i -lt 200 ]; do echo \"  frame $i of a deep traceback\" >&2; "
                                     "i=$((i+1)); done\necho 'RuntimeError: the real reason' >&2\necho >&2\nexit 1\n")
    assert logged == ["slurm-liquid: no advice, the job is submitted as asked: helper failed: RuntimeError: the real reason"]
