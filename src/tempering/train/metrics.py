"""The training console (rank 0's; the other ranks of a torchrun print nothing).

A run's `metrics.jsonl` and its trackers are written through `tracking.context.RunContext`.
"""

from __future__ import annotations

from rich.console import Console

console = Console(stderr=True)
quiet_console = Console(stderr=True, quiet=True)  # ranks other than 0 of a torchrun print nothing
