"""Terminal tables that survive a pipe.

On a terminal rich fits a table to the window. Piped or redirected (`temper eval compare
... | tee log`, CI logs) it assumes 80 columns and squeezes or cuts the widest columns (the
CI and delta columns of an eval comparison); a log wants every column, so print there at
the table's natural width.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.measure import Measurement


def print_wide(console: Console, renderable: Any) -> None:
    """Print `renderable`; when `console` is not a terminal, at its natural width."""
    if console.is_terminal:
        console.print(renderable)
        return
    need = Measurement.get(console, console.options.update(max_width=10_000), renderable).maximum
    saved = console.width
    console.width = max(saved, need)
    try:
        console.print(renderable)
    finally:
        console.width = saved
