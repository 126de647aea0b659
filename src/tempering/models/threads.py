"""How many torch threads a run uses: `threads: auto` (the default) takes the cores actually free.

On a shared or loaded host, asking for every core makes torch's threads wait on each other
(measured on a loaded 2-core host: `threads: 2` decoded 6-8x slower than `threads: 1`). So
`auto` is the cores this process may run on (`os.sched_getaffinity`) minus the 1-minute load
average (`os.getloadavg`), rounded, at least 1. An integer is used as given; `null` leaves
torch's own default. The choice and its reason are logged in one line.
"""

from __future__ import annotations

import os
from typing import Callable

_told: set[int] = set()  # thread counts already announced by this process (a stage, then its trainer)


def auto_threads(cpus: int, load: float) -> int:
    """The free cores: `cpus` minus the `load` average, rounded, at least 1."""
    return max(1, round(cpus - load))


def serving_threads() -> int:
    """torch threads for a serving thread (`BatchingEngine.start`): the usable cores but one, at least 1.

    Torch's OpenMP team in a thread other than the main one competes with the team the main
    thread already made (every process that loaded a model has one): on the 2-core host a
    GEMV in the serving thread took ~100 us with 2 threads against ~60 with 1 (42-66 in the main
    thread), and serving one stream decoded 49.6 tokens/s at 2 threads, 69.7 at 1; 32 streams
    352 vs 360 (docs/inference.md). One core is left to the main thread (HTTP, tokenising)."""
    return max(1, len(os.sched_getaffinity(0)) - 1)


def choose_threads(setting: int | str | None) -> tuple[int | None, str]:
    """(threads, why) for a `threads` setting: an int as given, "auto" from this host's cores
    and load, None for torch's default (then threads is None)."""
    if setting is None:
        return None, "torch's default"
    if setting != "auto":
        return int(setting), "set in the config"
    cpus, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    return auto_threads(cpus, load), f"auto: {cpus} usable cores - load average {load:.2f}"


def set_threads(setting: int | str | None, log: Callable[[str], None] | None = None) -> int | None:
    """Set torch's intra-op threads from `setting` (see `choose_threads`); `log` gets one line
    the first time this process uses a given count."""
    threads, why = choose_threads(setting)
    if threads is None:
        return None
    import torch

    torch.set_num_threads(threads)
    if log is not None and threads not in _told:
        _told.add(threads)
        log(f"threads: {threads} ({why})")
    return threads
