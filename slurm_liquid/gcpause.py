"""Pausing Python's cyclic garbage collector while a large, acyclic structure is built and used.

Reading 20,000 jobs from Slurm and placing them makes hundreds of thousands of small objects (dicts,
strings, datetimes, frozen dataclasses), none of them in a reference cycle: they are freed by
reference counting as soon as the pass drops them. The cyclic collector would meanwhile walk all of
them again every few thousand allocations, a quarter of a pass's time at that size
(benchmarks/scale). `gc_paused()` turns it off for one bounded piece of work and back on after, if
it was on; whatever cyclic garbage the piece leaves is collected by the next automatic run.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
