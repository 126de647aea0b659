"""What every `temper` command shares: the stderr console and the one-line error exit."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, soft_wrap=True, highlight=False)  # soft wrap: an error stays one line however narrow the terminal


def fail(message: object, code: int = 2) -> NoReturn:
    """Print `error: MESSAGE` on stderr (as text: brackets in paths are not markup) and exit."""
    err.print(f"[red]error:[/red] {escape(str(message))}")
    raise typer.Exit(code)
