"""`temper release ls|promote|rollback|decide`: versioned releases behind the `production` and
`candidate` aliases, moved only on a gate verdict that judged the very weights (docs/registry.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tempering.cli.common import fail
from tempering.cli.registry import REGISTRY, ROOT, open_registry, short, when
from tempering.tables import print_wide

out = Console(highlight=False, soft_wrap=True)  # a path or a rule stays on one line


release_app = typer.Typer(help="Releases: ls, promote, rollback, and the canary decision.", no_args_is_help=True)


def _verdict(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        fail(f"gate verdict not found: {path}")
    except json.JSONDecodeError as exc:
        fail(f"{path}:{exc.lineno}: not JSON ({exc.msg}); expected the gate.json `temper eval compare --out` writes")


@release_app.command("ls")
def release_ls(
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
    history: bool = typer.Option(False, "--history", help="Also list every alias move."),
) -> None:
    """Releases (newest first) with the alias each holds."""
    from tempering.runs.releases import Releases

    with open_registry(root, registry) as reg:
        rel = Releases(reg)
        table = Table("version", "status", "model", "sha256", "run", "released")
        for r in rel.list():
            table.add_row(f"v{r.version}", r.status, r.model, short(r.model_sha256), r.run_id or "", when(r.created_at))
        print_wide(out, table)
        if history:
            moves = Table("alias", "action", "to", "from", "reason", "at", title="alias moves")
            for e in rel.history():
                moves.add_row(
                    e.alias,
                    e.action,
                    f"v{e.release}" if e.release else "-",
                    f"v{e.previous}" if e.previous else "-",
                    e.reason or "",
                    when(e.at),
                )
            print_wide(out, moves)


@release_app.command("promote")
def release_promote(
    model: Path = typer.Argument(..., help="The checkpoint dir to release."),
    gate: Optional[Path] = typer.Option(
        None,
        "--gate",
        help="Its gate verdict (gate.json from `temper eval "
        "compare --out`); default: the newest verdict recorded for it.",
    ),
    alias: str = typer.Option("production", help="Alias to point at it: production, or candidate for a canary."),
    report: Optional[Path] = typer.Option(None, help="The eval report to record with it (default: the gate file)."),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """Release a checkpoint whose gate passed on these very weights and suites (refused
    otherwise) and point an alias at it."""
    from tempering.evals.verdict import promote_judged
    from tempering.runs.releases import ReleaseError, check_verdict

    if not model.exists():
        fail(f"model not found: {model}")
    verdict = _verdict(gate) if gate is not None else None
    with open_registry(root, registry) as reg:
        try:
            if verdict is not None:
                check_verdict(verdict, str(gate))
            record = (report or gate) if verdict is not None else None
            r = promote_judged(reg, model, verdict, alias=alias, record=record)
        except (ReleaseError, FileNotFoundError) as exc:
            fail(str(exc))
    out.print(f"released v{r.version} as {alias}: {escape(r.model)}")


@release_app.command("rollback")
def release_rollback(
    alias: str = typer.Option("production", help="The alias to roll back."),
    reason: Optional[str] = typer.Option(None, help="Why (kept in the alias history)."),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """Point an alias back at the release it held before its current one."""
    from tempering.runs.releases import ReleaseError, Releases

    with open_registry(root, registry) as reg:
        try:
            r = Releases(reg).rollback(alias, reason)
        except ReleaseError as exc:
            fail(str(exc))
    out.print(f"{alias} is v{r.version} again: {escape(r.model)}")


@release_app.command("decide")
def release_decide(
    gate: Path = typer.Option(
        ...,
        "--gate",
        help="The canary's second gate verdict (gate.json) on "
        "fresh samples, with a 'non-inferior on ... within ...' rule.",
    ),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """The canary decision: the candidate becomes production if non-inferior on a verdict that judged its
    weights, else it is rolled back (exit 1)."""
    from tempering.evals.verdict import decide_judged
    from tempering.runs.releases import ReleaseError

    with open_registry(root, registry) as reg:
        try:
            d = decide_judged(reg, _verdict(gate))
        except ReleaseError as exc:
            fail(str(exc))
    if d.promoted:
        out.print(f"[green]v{d.release.version} promoted to production[/green]: {escape(d.reason)}")
        return
    out.print(f"[red]v{d.release.version} rolled back[/red]: {escape(d.reason)}")
    raise typer.Exit(1)
