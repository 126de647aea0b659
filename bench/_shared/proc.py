"""This process's memory as the kernel counts it (/proc/self/status), for the memory benches."""

from __future__ import annotations

from pathlib import Path


def status_kb(field: str) -> int:
    """A kB field of /proc/self/status: VmRSS (resident now), VmHWM (the resident peak so far)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)
