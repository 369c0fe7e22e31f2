"""What root does inside a user's staging directory: through descriptors it opened itself without
following links, iteratively (no recursion, whatever the depth), every count bounded.

A user owns `u<uid>/` and everything their worker wrote there; between any two of root's steps
they may rename, swap a directory for a link, or add files. So root never builds a path from a
name and walks it: it opens each directory relative to the descriptor of its parent with
O_NOFOLLOW, checks on that descriptor what it is, and acts on names relative to it.
"""

from __future__ import annotations

import os
import stat

from slurm_liquid.staging.worker import INODE_BYTES, MAX_DEPTH, OVERHEAD_INODES, cost

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
REMOVE_STEPS = 50_000_000      # a removal racing a user who keeps adding files gives up after this


class Exceeded(Exception):
    """A tree holds more than the bound it was measured against (or is deeper than MAX_DEPTH)."""


def open_dir(name: str, dir_fd: int | None = None) -> int:
    """A descriptor on the directory `name` (relative to dir_fd), refusing a link (ELOOP/ENOTDIR)."""
    return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def _names(fd: int) -> list[tuple[str, bool]]:
    with os.scandir(fd) as entries:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]


def measure(parent_fd: int, name: str, max_bytes: int, max_inodes: int) -> tuple[int, int]:
    """(bytes, inodes) of the tree `name`, charged as the worker charges them (cost), from fstat/lstat
    relative to descriptors: a link is counted as a link, never followed; over a bound: Exceeded."""
    total, inodes = 0, 0
    top = open_dir(name, parent_fd)
    stack = [(top, 0)]
    try:
        total, inodes = INODE_BYTES, 1
        while stack:
            fd, depth = stack.pop()
            try:
                for child, _ in _names(fd):
                    st = os.stat(child, dir_fd=fd, follow_symlinks=False)
                    total += cost(st)
                    inodes += 1
                    if total > max_bytes or inodes > max_inodes:
                        raise Exceeded(f"{name}: more than {max_bytes} bytes or {max_inodes} inodes")
                    if stat.S_ISDIR(st.st_mode):
                        if depth + 1 > MAX_DEPTH + OVERHEAD_INODES:
                            raise Exceeded(f"{name}: deeper than {MAX_DEPTH} levels")
                        sub = open_dir(child, fd)
                        if (os.fstat(sub).st_dev, os.fstat(sub).st_ino) != (st.st_dev, st.st_ino):
                            os.close(sub)
                            raise Exceeded(f"{name}: changed while measured")
                        stack.append((sub, depth + 1))
            finally:
                os.close(fd)
    finally:
        for fd, _ in stack:
            os.close(fd)
    return total, inodes


def remove(parent_fd: int, name: str) -> None:
    """Remove `name` under parent_fd and all below it, never following a link, without recursion and
    with one directory descriptor open at a time (a tree thousands of levels deep goes too): down
    into each subdirectory, back up through `..`, checked against the inode it came from."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=parent_fd)
        return
    cur = open_dir(name, parent_fd)
    path = [(os.fstat(cur).st_dev, os.fstat(cur).st_ino, name)]      # (dev, ino, name in parent) down here
    steps = 0
    try:
        while True:
            steps += 1
            if steps > REMOVE_STEPS:
                raise OSError(f"{name}: still changing after {REMOVE_STEPS} steps")
            down = None
            for child, is_dir in _names(cur):
                steps += 1
                if not is_dir:
                    os.unlink(child, dir_fd=cur)
                    continue
                sub = open_dir(child, cur)
                sst = os.fstat(sub)
                down = (sub, (sst.st_dev, sst.st_ino, child))
                break
            if down is not None:
                os.close(cur)
                cur = down[0]
                path.append(down[1])
                continue
            if len(path) == 1:             # the top is empty: remove it from the caller's directory
                _rmdir_checked(parent_fd, path[0])
                return
            up = open_dir("..", cur)
            ust = os.fstat(up)
            if (ust.st_dev, ust.st_ino) != path[-2][:2]:
                os.close(up)
                raise OSError(f"{name}: a directory moved while it was removed")
            os.close(cur)
            cur = up
            _rmdir_checked(cur, path.pop())
    finally:
        os.close(cur)


def _rmdir_checked(parent_fd: int, entry: tuple[int, int, str]) -> None:
    dev, ino, name = entry
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if (st.st_dev, st.st_ino) != (dev, ino):
        raise OSError(f"{name}: replaced while it was removed")
    os.rmdir(name, dir_fd=parent_fd)
