"""How many torch threads a run uses: `threads: auto` (the default) takes the cores actually free.

On a shared or loaded host, asking for every core makes torch's threads wait on each other
(measured on a loaded 2-core host: `threads: 2` decoded 6-8x slower than `threads: 1`). So
`auto` is the cores this process may run on (`os.sched_getaffinity`) minus the 1-minute load
average (`os.getloadavg`) that is not this process's own, rounded, at least 1. An integer is
used as given; `null` leaves torch's own default. The choice and its reason are logged in one line.

The load average counts this process too: a pipeline's second stage, started right after its
first had kept both cores busy, read a load of ~1.2-2 and took 1 thread on an idle 2-core host
(the demo's GRPO ran at half speed). So this process's own share is taken out: its mean CPU use
over its life (`own_load`), scaled by how much of it the average's one-minute window has taken in.
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable

import psutil

_told: set[int] = set()  # thread counts already announced by this process (a stage, then its trainer)


def auto_threads(cpus: int, load: float) -> int:
    """The free cores: `cpus` minus the `load` average, rounded, at least 1."""
    return max(1, round(cpus - load))


def own_load(cpu_s: float, age_s: float) -> float:
    """This process's share of the 1-minute load average: its mean utilisation (`cpu_s` of CPU
    over `age_s` of life) times 1 - exp(-age / 60), how far the kernel's exponentially
    weighted average has taken in a load that began `age_s` ago."""
    if age_s <= 0:
        return 0.0
    return cpu_s / age_s * (1.0 - math.exp(-age_s / 60.0))


def _own_load_now() -> float:
    me = psutil.Process()
    cpu = me.cpu_times()
    return own_load(cpu.user + cpu.system + cpu.children_user + cpu.children_system, time.time() - me.create_time())


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
    cpus, load, own = len(os.sched_getaffinity(0)), os.getloadavg()[0], _own_load_now()
    other = max(0.0, load - own)
    return auto_threads(cpus, other), f"auto: {cpus} usable cores - load average {load:.2f} (this process's {own:.2f})"


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
