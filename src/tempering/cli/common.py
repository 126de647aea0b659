"""What every `temper` command shares: the stderr console, the one-line error exit, the training flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence

import typer
from rich.console import Console
from rich.markup import escape

err = Console(
    stderr=True, soft_wrap=True, highlight=False
)  # soft wrap: an error stays one line however narrow the terminal


# The flags every training command (sft, grpo, dpo, rm) shares; typer reads one option object
# as the default of several commands.
STEPS = typer.Option(None, help="Optimizer steps.")


OUT = typer.Option(None, "--out", help="Run root.")


NAME = typer.Option(None, help="Run name (re-using one resumes it).")


FULL = typer.Option(False, "--full", help="Train all parameters instead of LoRA.")


FORCE = typer.Option(False, "--force", help="Resume even though the config changed.")


def fail(message: object, code: int = 2) -> NoReturn:
    """Print `error: MESSAGE` on stderr (as text: brackets in paths are not markup) and exit."""
    err.print(f"[red]error:[/red] {escape(str(message))}")
    raise typer.Exit(code)


def refuse_flag_keys(overrides: Sequence[str], flags: dict[str, Any]) -> None:
    """Fail on a `--set` of a key that a flag sets (the flag's value would silently win)."""
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key.split(".")[0] in flags:
            fail(f"--set {item!r}: {key.split('.')[0]} is set by a flag of this command; use the flag")


def train_from_config(
    kind: type,
    run: Callable[..., dict[str, Any]],
    config: Path,
    sets: Sequence[str],
    literal: dict[str, Any],
    full: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """The shared body of the training commands (sft, grpo, dpo, rm): the config file with
    `--set` values and flag overrides (`full`: all parameters, no LoRA), then the run; any
    bad input is the one-line error exit. Returns the run summary for the caller to print."""
    from tempering.config import ConfigError, load_config
    from tempering.train.checkpoint import CheckpointError

    literal = {**{k: v for k, v in literal.items() if v is not None}, **({"lora": None} if full else {})}
    try:
        cfg = load_config(kind, config, list(sets), literal)
    except (ConfigError, FileNotFoundError) as exc:
        fail(str(exc))
    try:
        return run(cfg, force=force)
    except (ValueError, FileNotFoundError, CheckpointError) as exc:  # bad rows, a locked run, a template error, ...
        fail(str(exc))
