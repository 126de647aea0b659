"""`temper runs ls|show|prune`: the runs recorded in the registry; `temper traj`: the rollouts a run stored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tempering.cli.common import fail
from tempering.cli.registry import REGISTRY, ROOT, open_registry, print_evals, short, when
from tempering.tables import print_wide

out = Console(highlight=False, soft_wrap=True)  # a path or a rule stays on one line


runs_app = typer.Typer(help="Runs recorded in the registry: ls, show, prune.", no_args_is_help=True)


@runs_app.command("ls")
def runs_ls(
    root: Path = ROOT, registry: Optional[str] = REGISTRY, limit: int = typer.Option(50, help="Show the newest N runs.")
) -> None:
    """List recorded runs, newest first; a run interrupted and resumed is one row (its newest attempt)."""
    with open_registry(root, registry) as reg:
        table = Table("id", "name", "kind", "status", "base model", "started")
        for r in reg.list(limit, resumed=False):
            earlier = sum(a["status"] == "resumed" for a in reg.attempts(r["name"]))
            status = r["status"] + (f" (resumed{f' x{earlier}' if earlier > 1 else ''})" if earlier else "")
            table.add_row(r["id"], r["name"], r["kind"], status, r["base_model"] or "", when(r["started_at"]))
    print_wide(out, table)


@runs_app.command("show")
def runs_show(
    run: str = typer.Argument(..., help="Run id or name (the newest run of that name)."),
    root: Path = ROOT,
    registry: Optional[str] = REGISTRY,
) -> None:
    """One run: status, config summary, inputs with roles and hashes, outputs, metrics, evals."""
    with open_registry(root, registry) as reg:
        try:
            r = reg.get(run)
        except KeyError as exc:
            fail(exc.args[0])
        out.print(
            f"[bold]{escape(r['name'])}[/bold] ({r['kind']}, {r['id']}) {r['status']}"
            f"  started {when(r['started_at'])}  finished {when(r['finished_at']) or '-'}"
        )
        if r["error"]:
            out.print(f"error: {escape(r['error'])}")
        for a in reg.attempts(r["name"]):
            if a["status"] == "resumed" and a["id"] != r["id"]:
                out.print(f"resumed attempt {a['id']} (started {when(a['started_at'])}): {escape(a['error'] or '')}")
        inputs = Table("role", "input", "sha256", "from run", title="inputs")
        for i in reg.inputs(r["id"]):
            inputs.add_row(i.role, i.path, short(i.sha256), i.parent_run or "")
        outputs = Table("role", "output", "sha256", title="outputs")
        for o in reg.outputs(r["id"]):
            outputs.add_row(o["role"], o["path"], short(o["sha256"]))
        print_wide(out, inputs)
        print_wide(out, outputs)
        if r["metrics"]:
            out.print("metrics: " + escape(json.dumps(r["metrics"], sort_keys=True)[:2000]))
        print_evals(reg.evals(run_id=r["id"]))


@runs_app.command("prune")
def runs_prune(root: Path = ROOT, registry: Optional[str] = REGISTRY) -> None:
    """Remove failed runs whose run dir (under --root) no longer exists."""
    from tempering.runs.stage import prune_failed

    with open_registry(root, registry) as reg:
        removed = prune_failed(reg, root)
    out.print(
        f"removed {len(removed)} failed run(s) without a run dir" + (f": {', '.join(removed)}" if removed else "")
    )


def traj(
    run_dir: Path = typer.Argument(..., help="A GRPO run directory (runs/NAME)."),
    step: Optional[int] = typer.Option(None, help="Only this step."),
    worst: bool = typer.Option(False, "--worst", help="Lowest reward first."),
    best: bool = typer.Option(False, "--best", help="Highest reward first."),
    flagged: bool = typer.Option(False, "--flagged", help="Only rollouts with flags."),
    limit: int = typer.Option(20, help="Rows to show (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line instead of a table."),
) -> None:
    """Read back the rollouts a GRPO run stored (prompt, completion, reward, flags)."""
    from rich.table import Table

    from tempering.rollout.store import read_trajectories

    if worst + best + flagged > 1:
        fail("choose at most one of --worst, --best, --flagged")
    order = "worst" if worst else "best" if best else "flagged" if flagged else None
    try:
        rows = read_trajectories(run_dir, step, order, limit or None)
    except FileNotFoundError as exc:
        fail(str(exc))
    if as_json:
        for r in rows:
            print(json.dumps(r))
        return
    table = Table("step", "task", "reward", "adv", "flags", "completion", show_lines=False)
    for r in rows:
        table.add_row(
            str(r["step"]),
            r["task_id"],
            f"{r['reward']:.2f}",
            f"{r['advantage']:+.2f}",
            ",".join(r["flags"]),
            r["completion"][:80].replace("\n", "\\n"),
        )
    print_wide(out, table)
    out.print(f"{len(rows)} rollouts")
