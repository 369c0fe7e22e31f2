"""How Slurm commands are run: argument lists only, always with a timeout and an output bound.

`LocalRunner` runs them on this host; `ContainerRunner` runs them inside a container of the
test cluster (`docker exec`), so tests and the demo drive a real Slurm from outside it.

Output is decoded as UTF-8 with `errors="replace"`: Slurm prints job names, comments and
scripts byte for byte, and a user can put any byte there. An invalid byte becomes U+FFFD, so the
JSON around it still parses and every later use of the text (logs, files, terminals, JSON
written back) is safe. `surrogateescape` would keep the bytes, but as lone surrogates that make
any strict UTF-8 encoder downstream raise, moving the crash to wherever the text goes next.
The cost: a comment read and written back loses the invalid bytes (each becomes U+FFFD); its
valid text is unchanged. Input (a batch script on stdin) is encoded with `surrogateescape`,
so a script read from disk with that handler reaches sbatch byte for byte.
"""

from __future__ import annotations

import logging
import os
import selectors
import subprocess
import time
from dataclasses import dataclass
from typing import Protocol, Sequence

from slurm_liquid.slurm.errors import SlurmCommandError

log = logging.getLogger(__name__)
# `squeue --json` of 10,000 jobs is about 60 MiB; an answer past this is not one we can use
MAX_OUTPUT_BYTES = 512 * 2 ** 20
_STDERR_KEEP = 64 * 1024  # the end of stderr is where Slurm's message is


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout: float, stdin: str | None = None) -> str:
        """Run `argv`; return its stdout, or raise SlurmCommandError."""
        ...


@dataclass(frozen=True)
class LocalRunner:
    prefix: tuple[str, ...] = ()
    max_output: int = MAX_OUTPUT_BYTES

    def __call__(self, argv: Sequence[str], *, timeout: float, stdin: str | None = None) -> str:
        full = [*self.prefix, *argv]
        log.debug("running %s", full)
        try:
            proc = subprocess.Popen(full, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except FileNotFoundError:
            raise SlurmCommandError(argv, f"could not run: {full[0]} is not installed or not on PATH") from None
        except OSError as exc:
            raise SlurmCommandError(argv, f"could not run: {exc.strerror}") from None
        data = stdin.encode("utf-8", "surrogateescape") if stdin is not None else b""
        try:
            out, err = _communicate(proc, data, timeout, self.max_output)
        except _Overflow:
            raise SlurmCommandError(argv, f"printed more than {self.max_output} bytes") from None
        except subprocess.TimeoutExpired:
            raise SlurmCommandError(argv, f"did not answer within {timeout:g} s") from None
        stdout, stderr = decode(out), decode(err)
        if proc.returncode != 0:
            raise SlurmCommandError(argv, f"failed with exit code {proc.returncode}", proc.returncode, stderr)
        return stdout


def decode(data: bytes) -> str:
    """A command's output as text: UTF-8, each invalid byte replaced by U+FFFD (see the module doc)."""
    return data.decode("utf-8", "replace")


class _Overflow(Exception):
    pass


def _communicate(proc: subprocess.Popen, data: bytes, timeout: float, limit: int) -> tuple[bytes, bytes]:
    """subprocess's communicate() with a bound on stdout: feed stdin, read both pipes until they
    close or `timeout` passes (TimeoutExpired) or stdout passes `limit` (_Overflow); the child
    is killed and reaped on every way out but the normal one."""
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    try:
        with selectors.DefaultSelector() as sel:
            assert proc.stdout is not None and proc.stderr is not None
            sel.register(proc.stdout, selectors.EVENT_READ, out)
            sel.register(proc.stderr, selectors.EVENT_READ, err)
            if proc.stdin is not None:
                if data:
                    os.set_blocking(proc.stdin.fileno(), False)
                    sel.register(proc.stdin, selectors.EVENT_WRITE, None)
                else:
                    proc.stdin.close()
            view, sent = memoryview(data), 0
            while sel.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(proc.args, timeout)
                for key, _ in sel.select(left):
                    if key.data is None:  # stdin
                        try:
                            sent += os.write(key.fd, view[sent:sent + 65536])
                        except BlockingIOError:
                            continue
                        except BrokenPipeError:  # it stopped reading: its answer will say why
                            sent = len(data)
                        if sent >= len(data):
                            sel.unregister(key.fileobj)
                            key.fileobj.close()
                        continue
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()
                        continue
                    key.data.extend(chunk)
                    if key.data is err and len(err) > 2 * _STDERR_KEEP:
                        del err[:-_STDERR_KEEP]
                    if len(out) > limit:
                        raise _Overflow
        proc.wait(max(deadline - time.monotonic(), 0.01))
    except BaseException:
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        raise
    return bytes(out), bytes(err)


def ContainerRunner(container: str, docker: str = "docker") -> LocalRunner:
    """Run Slurm commands inside `container` (e.g. the test cluster's `liquid-trixie-slurmctld`)."""
    return LocalRunner(prefix=(docker, "exec", "-i", container))
