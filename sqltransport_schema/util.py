"""Small helpers shared by the pure core."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector around allocation-heavy, cycle-free work.

    Loading and compiling a 10,000-endpoint topology allocates a few hundred thousand
    small objects that live until the end; the collector would rescan them again and
    again (half the time of a large compile) and find nothing to free.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
