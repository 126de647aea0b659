"""What every `temper` command shares: the stderr console, how a command's errors end it (bad
input: one line; a bug: one line and a crash log), the training flags."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any, Callable, NoReturn, Sequence, TypeVar

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from tempering.errors import DEBUG_ENV, UserError, crash_dir, one_line, write_crash_log

err = Console(
    stderr=True, soft_wrap=True, highlight=False
)  # soft wrap: an error stays one line however narrow the terminal


# The flags every training command (sft, grpo, dpo, rm) shares; typer reads one option object
# as the default of several commands.
STEPS = typer.Option(None, help="Optimizer steps.")


OUT = typer.Option(None, "--out", "-o", help="Run root.")


NAME = typer.Option(None, help="Run name (re-using one resumes it).")


FULL = typer.Option(False, "--full", help="Train all parameters instead of LoRA.")


FORCE = typer.Option(False, "--force", help="Resume even though the config changed.")


def fail(message: object, code: int = 2) -> NoReturn:
    """Print `error: MESSAGE` on stderr (as text: brackets in paths are not markup) and exit."""
    err.print(f"[red]error:[/red] {escape(str(message))}")
    raise typer.Exit(code)


INTERNAL = "internal error (a bug in Tempering or a library it calls, not your input)"
# typer's and click's own ways to end a command, usage errors included (TyperException is the base
# of the click exceptions typer vendors; plain click's are listed for code that raises them itself)
EXITS = (
    typer.Exit,
    typer.Abort,
    typer.TyperException,
    click.exceptions.Exit,
    click.exceptions.Abort,
    click.ClickException,
)
T = TypeVar("T")


INTERNAL_EXIT = 70
"""A bug's exit status (sysexits' EX_SOFTWARE), apart from bad input (2) and a rejected gate (1)."""


def run_command(body: Callable[[], T], debug: Callable[[], bool]) -> T:
    """Run a command's body; the one place its exceptions become exits.

    Typer/click exits pass as they are. A `UserError` (bad input) is `error: MESSAGE` and exit 2.
    Anything else is a bug: one `internal error` line naming the crash log that holds its
    traceback (the run's `crash.log` where the run dir is known, else a file in the temp dir),
    exit 70 (EX_SOFTWARE: apart from a rejected gate's 1 and bad input's 2); with `--debug` or
    `TEMPERING_DEBUG=1` the traceback is printed on stderr too.
    `debug` is asked only after the body ran (the `--debug` flag is parsed inside it)."""
    try:
        return body()
    except EXITS:
        raise
    except UserError as exc:
        fail(str(exc))
    except Exception as exc:
        internal_error(exc, debug() or debug_env())


def debug_env() -> bool:
    """`TEMPERING_DEBUG` set to anything but empty or 0."""
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def internal_error(exc: Exception, debug: bool) -> NoReturn:
    """Print the one line of a bug (and with `debug` its traceback), keep the traceback, exit 70."""
    log = write_crash_log(exc, crash_dir(exc))
    if debug:
        sys.stderr.write("".join(traceback.format_exception(exc)))
        sys.stderr.flush()
    err.print(f"[red]{INTERNAL}:[/red] {escape(one_line(exc))} — traceback in {escape(str(log))}")
    raise typer.Exit(INTERNAL_EXIT)


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
    `--set` values and flag overrides (`full`: all parameters, no LoRA), then the run (bad input
    in either is a `UserError`, which `run_command` ends as one line). Returns the run summary."""
    from tempering.config import load_config

    literal = {**{k: v for k, v in literal.items() if v is not None}, **({"lora": None} if full else {})}
    return run(load_config(kind, config, list(sets), literal), force=force)


def retired_option(old: str, new: str, takes_value: bool = False) -> Any:
    """A hidden option for a retired spelling: giving it ends the command with one line naming
    the new spelling (exit 2), before any other option is acted on."""

    def refuse(value: Any) -> None:
        if value:
            fail(f"{old} is now {new}")

    return typer.Option(None if takes_value else False, old, hidden=True, is_eager=True, callback=refuse)


class RetiredCommands(TyperGroup):
    """A command group that answers a retired command name with one line naming its new one
    (exit 2) instead of click's usage box; `retired` maps old name -> new words."""

    retired: dict[str, str] = {}

    def get_command(self, ctx: typer.Context, cmd_name: str) -> Any:
        if cmd_name in self.retired and cmd_name not in self.commands:
            fail(f"`{' '.join(_words(ctx))} {cmd_name}` is now `{' '.join(_words(ctx))} {self.retired[cmd_name]}`")
        return super().get_command(ctx, cmd_name)


def _words(ctx: typer.Context) -> list[str]:
    """`temper` and the group names that lead to ctx's command (whatever the program was called)."""
    names, node = [], ctx
    while node.parent is not None:
        names.append(node.info_name or "")
        node = node.parent
    return ["temper", *reversed(names)]
