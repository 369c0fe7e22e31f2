"""Root doing a little on a user's behalf: our own code run as the job's user, and a file the user named
read with their rights, every count and wait bounded.

Root (the daemon, the node agents, `explain` run by an admin) never opens a path a user chose: a
user could name /dev/zero, a FIFO, a file only root may read, or a file on a hung file system. So:

- `run_as(user, argv, ...)` starts a child with the user's uid, gid and groups (setgroups, setgid,
  setuid before it runs) and an address-space limit, feeds it one request, and reads at most
  `max_out` bytes of answer; it is killed at `timeout`, or when it shows no progress (a byte on
  stderr) for `stall_s`. A user may stop or debug their own child: the wait is bounded anyway, and
  the answer is a claim the caller checks.
- `read_user_file(path, max_bytes)` reads a regular file of at most `max_bytes`: opened without
  blocking (a FIFO or device is refused by type, never read), checked with fstat on that descriptor,
  read with a bound. In the process itself when the caller is the user (the submit-time helper);
  as the job's user in a child when the caller is root and said whose file it is (`reading_as`).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import selectors
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Iterator, Sequence

READ_TIMEOUT_S = 3.0          # a user's config file on a healthy file system reads in milliseconds
CHILD_MEMORY = 1 << 30        # address space of a child run as a user (Python, tarfile, a copy buffer)
PYTHON = sys.executable       # the interpreter children run (one every user may execute)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]

    @classmethod
    def of(cls, name: str) -> "User":
        """The user as this host knows them (KeyError when unknown)."""
        import pwd

        pw = pwd.getpwnam(name)
        return cls(name, pw.pw_uid, pw.pw_gid, tuple(os.getgrouplist(name, pw.pw_gid)))


class UserFileError(Exception):
    """A user-named file that is not read: `reason` is a word, str() says what and why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class Answer:
    status: str               # ok | timeout | stalled | too-long | failed
    out: bytes = b""
    err_tail: str = ""
    returncode: int | None = None


def _limit_memory(nbytes: int):
    import resource   # imported here, before the fork: the child only calls setrlimit

    def limit() -> None:       # runs in the child after setuid, before exec (not yet debuggable)
        resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))
    return limit


def run_as(user: User | None, argv: Sequence[str], request: bytes, timeout: float, max_out: int,
           stall_s: float | None = None, env: dict[str, str] | None = None,
           memory: int = CHILD_MEMORY) -> Answer:
    """Run argv as `user` (None: as we are), bounded in time, silence, memory and answer size."""
    as_user: dict = {}
    if user is not None and (os.geteuid() == 0 or user.uid != os.geteuid()):
        as_user = {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                cwd="/", env=env if env is not None else {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                                umask=0o077, preexec_fn=_limit_memory(memory), **as_user)  # noqa: PLW1509
    except (OSError, subprocess.SubprocessError) as exc:
        return Answer("failed", err_tail=f"cannot start {argv[0]}: {exc}")
    status, out, err = "ok", bytearray(), bytearray()
    started = last = time.monotonic()
    try:
        try:
            proc.stdin.write(request)          # small: fits the pipe whether or not the child reads it
            proc.stdin.close()
        except OSError:
            pass
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ, "out")
            sel.register(proc.stderr, selectors.EVENT_READ, "err")
            while sel.get_map():
                now = time.monotonic()
                left = min(started + timeout - now, (last + stall_s - now) if stall_s else timeout)
                if left <= 0:
                    status = "timeout" if now >= started + timeout else "stalled"
                    break
                for key, _ in sel.select(left):
                    chunk = os.read(key.fileobj.fileno(), 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                    elif key.data == "out":
                        out += chunk
                        if len(out) > max_out:
                            status = "too-long"
                            break
                    else:
                        last = time.monotonic()      # progress: the child says it is alive
                        err = (err + chunk)[-2000:]
                if status != "ok":
                    break
        if status == "ok":
            try:
                proc.wait(max(started + timeout - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                status = "timeout"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
    return Answer(status, bytes(out[:max_out]), err.decode(errors="replace").strip(". \n")[-300:], proc.returncode)


# ------------------------------------------------------------------ reading a file a user named

def read_regular(path: str, max_bytes: int) -> bytes:
    """A regular file's bytes, at most `max_bytes`, read with this process's rights; never blocks on
    a FIFO or device (opened non-blocking, refused by type before any read)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UserFileError("unreadable", f"cannot read it: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserFileError("not-a-file", "not a regular file")
        if st.st_size > max_bytes:
            raise UserFileError("too-large", f"{st.st_size} bytes is more than {max_bytes}")
        chunks, total = [], 0
        while total <= max_bytes:               # the size may grow while read: count, do not trust
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise UserFileError("too-large", f"more than {max_bytes} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise UserFileError("unreadable", f"cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


_reading_as: contextvars.ContextVar[str | None] = contextvars.ContextVar("liquid_reading_as", default=None)


@contextlib.contextmanager
def reading_as(user_name: str) -> Iterator[None]:
    """Within this block, files users name (hf-config) are read as `user_name` (root callers)."""
    token = _reading_as.set(user_name)
    try:
        yield
    finally:
        _reading_as.reset(token)


def reader_argv(max_bytes: int) -> list[str]:
    return [PYTHON, "-m", "slurm_liquid.asuser", str(max_bytes)]


def read_user_file(path: str, max_bytes: int, timeout: float = READ_TIMEOUT_S) -> bytes:
    """A file a user named: as the user whose file it is when root was told (`reading_as`), else
    with this process's own rights (a user running the helper reads what they can read)."""
    whose = _reading_as.get()
    if whose is None or os.geteuid() != 0:
        return read_regular(path, max_bytes)
    try:
        user = User.of(whose)
    except KeyError:
        raise UserFileError("unknown-user", f"not read: user {whose} is unknown on this host") from None
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    answer = run_as(user, reader_argv(max_bytes), os.fsencode(path),
                    timeout, max_out=max_bytes + 4096, env=env, memory=256 << 20)
    if answer.status != "ok":
        raise UserFileError("timeout" if answer.status in ("timeout", "stalled") else "unreadable",
                            f"not read as {whose}: {answer.status}")
    if answer.out[:3] == b"ok\n":
        return answer.out[3:3 + max_bytes]
    reason, _, detail = answer.out.decode(errors="replace").partition("\n")
    raise UserFileError(reason[:40] or "unreadable", detail[:300] or f"exit {answer.returncode}")


def main() -> int:
    """The child of read_user_file, running as the user: path on stdin, `ok\\n` + bytes on stdout."""
    max_bytes = int(sys.argv[1])
    path = os.fsdecode(sys.stdin.buffer.read(8192))
    try:
        data = read_regular(path, max_bytes)
    except UserFileError as exc:
        sys.stdout.buffer.write(f"{exc.reason}\n{exc}".encode())
        return 0
    sys.stdout.buffer.write(b"ok\n" + data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
