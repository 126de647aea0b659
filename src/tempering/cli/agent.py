"""`temper agent`: `temper agent CONFIG.yaml` trains (the registered `agent` objective, also
`temper agent train CONFIG.yaml`); `temper agent export-recovered RUN` writes the run's recovered
episodes (error -> feedback -> fix) as SFT rows with provenance (`agents/recovered.py`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

import typer
from typer.core import TyperGroup

from tempering.cli.common import fail


class TrainByDefault(TyperGroup):
    """A group whose first word, when it names no subcommand, is the training command's config."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["train", *args]
        return super().parse_args(ctx, args)


def export_recovered(
    run: Path = typer.Argument(..., help="A `temper agent` run directory (runs/NAME) with trajectories.jsonl."),
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Where to write the rows (default: RUN/recovered.jsonl)."
    ),
) -> None:
    """Write the run's recovered episodes (an error, the feedback read, then success) as SFT rows
    with provenance (run, step, task id); prints one JSON line."""
    from tempering.agents.recovered import export_recovered as export
    from tempering.errors import UserError

    try:
        path, rows, episodes = export(run, out)
    except UserError as exc:  # a bad row's message quotes the row: its first line is the error
        fail(str(exc).splitlines()[0])
    print(json.dumps({"recovered": str(path), "rows": rows, "episodes": episodes}))


def agent_app(train: Callable[..., Any], help_text: str) -> typer.Typer:
    """The `temper agent` group around the registered training command `train`."""
    app = typer.Typer(cls=TrainByDefault, help=help_text, no_args_is_help=True, add_completion=False)
    app.command("train", help=help_text)(train)
    app.command("export-recovered")(export_recovered)
    return app
