"""Pausing Python's cyclic garbage collector around one bounded batch of work.

A billing run at 10,000 tenants keeps ~10^5 small containers alive until it writes them
(grouped rows, lines, the rows it copies): each allocation threshold they cross starts a
collection, and every few of those a full one that walks the whole heap (Django, the app, the
run's own objects), ~100 ms each; measured, 0.45 s of a run's 1.1 s of CPU. The run's objects
hold no reference cycles (tuples, numbers, strings, lists in dicts), so those collections
free nothing; reference counting frees everything as before. Garbage with cycles made during
the pause waits for the next collection after it.
"""

import gc
from contextlib import contextmanager


@contextmanager
def collector_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
