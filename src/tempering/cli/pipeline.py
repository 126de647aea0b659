"""`temper run PIPELINE.yaml` and `temper demo`.

Exit codes of `temper run`: 0 every stage done or cached; 1 a gate rejected the candidate (later
stages did not run); 2 the pipeline file is invalid (nothing ran); 3 a stage failed (its error is printed)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tempering.cli.common import INTERNAL, err, fail

STYLE = {
    "pending": "dim",
    "cached": "cyan",
    "running": "yellow",
    "done": "green",
    "failed": "red",
    "rejected": "bold red",
    "skipped": "dim",
}


def _duration(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class StageBoard:
    """The live table: one row per stage (status, hash, steps, ETA, last progress line)."""

    def __init__(self, stages: list[Any], plain: Console | None = None):
        self.plain = plain  # not a terminal (CI logs, `| tee`): one line per event instead of a redrawn table
        self.rows: dict[str, dict[str, Any]] = {
            s.name: {"kind": s.kind, "status": "pending", "hash": "", "detail": ""} for s in stages
        }
        self.lock = threading.Lock()

    def __call__(self, stage: str, status: str, info: dict[str, Any]) -> None:
        with self.lock:
            # a rebalancing attempt can add a stage (a track's replay mix) the first plan did not have
            self.rows.setdefault(stage, {"kind": "", "status": "pending", "hash": "", "detail": ""})
            self._update(stage, status, info)
        if self.plain is not None:
            row = self.rows[stage]
            took = f" in {_duration(row['elapsed'])}" if status != "log" and "elapsed" in row else ""
            text = row["detail"] if status == "log" else f"{status}{took} {row['hash']} {row['detail']}".rstrip()
            self.plain.print(f"[{stage}] {text}", highlight=False, markup=False, soft_wrap=True)

    def _update(self, stage: str, status: str, info: dict[str, Any]) -> None:
        row = self.rows[stage]
        if status == "log":
            row["detail"] = " ".join(str(info.get("line", "")).split())[:80]
            return
        row["status"] = status
        if info.get("hash"):
            row["hash"] = info["hash"][:12]
        if status == "running":
            row.update(started=time.time(), run_dir=info.get("run_dir"), steps=info.get("steps"))
        elif status in ("done", "cached", "rejected", "failed"):
            row["detail"] = self._closing(status, info)
            if "started" in row:
                row["elapsed"] = time.time() - row["started"]

    @staticmethod
    def _closing(status: str, info: dict[str, Any]) -> str:
        if status == "failed":
            return str(info.get("error", ""))[:120]
        summary = info.get("summary") or {}
        if status == "rejected" or summary.get("verdict"):
            return f"gate: {summary.get('verdict', 'rejected')} " + "; ".join(summary.get("failed_rules", []))
        return str(info.get("run_dir", ""))

    def _progress(self, row: dict[str, Any]) -> tuple[str, str]:
        """(steps, eta) of a running training stage, from its metrics.jsonl (the trainer's own record)."""
        steps, run_dir = row.get("steps"), row.get("run_dir")
        if not steps or run_dir is None:
            return "", ""
        from tempering.tracking.events import metrics_path

        path = metrics_path(run_dir)
        try:
            records = [json.loads(line) for line in path.read_text().splitlines()[-50:] if line.strip()]
        except (OSError, json.JSONDecodeError):
            return f"0/{steps}", ""
        timed = [r for r in records if isinstance(r.get("step"), int) and "time" in r and "loss" in r]
        if not timed:
            return f"0/{steps}", ""
        last = timed[-1]
        eta = ""
        if len(timed) > 1 and last["step"] > timed[0]["step"]:
            per_step = (last["time"] - timed[0]["time"]) / (last["step"] - timed[0]["step"])
            eta = _duration(per_step * (steps - last["step"]))
        return f"{last['step']}/{steps}", eta

    def render(self) -> Table:
        table = Table(
            "stage", "kind", "status", "hash", "steps", "eta", "time", "detail", title="pipeline", title_justify="left"
        )
        with self.lock:
            for name, row in self.rows.items():
                steps, eta = self._progress(row) if row["status"] == "running" else ("", "")
                took = row.get("elapsed") or (time.time() - row["started"] if row["status"] == "running" else None)
                table.add_row(
                    name,
                    row["kind"],
                    Text(row["status"], style=STYLE.get(row["status"], "")),
                    row["hash"],
                    steps,
                    eta,
                    _duration(took) if took is not None else "",
                    row["detail"],
                )
        return table


def run_pipeline_cmd(
    pipeline: Path = typer.Argument(..., help="Pipeline YAML (see examples/pipeline.yaml and docs/pipeline.md)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate and print each stage's hash and whether it is cached; run nothing."
    ),
    force_stage: List[str] = typer.Option(
        [], "--force-stage", help="Recompute this stage even if cached (repeatable)."
    ),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Run root (default: the file's `out`)."),
    seed: Optional[int] = typer.Option(
        None,
        "--seed",
        help="Seed of every stage that sets none (default: the "
        "file's `seed`); stages that set their own keep it, and stay cached.",
    ),
) -> None:
    """Run a pipeline: stages in order, cached by content hash, resumable after a kill; a failed gate stops it."""
    from tempering.errors import crashes_into
    from tempering.pipeline.runner import PipelineError, load_plan
    from tempering.pipeline.runner import dry_run as plan_only
    from tempering.runs.stage import StageError

    try:
        plan = load_plan(pipeline, seed)
        if out is not None:
            plan.root = Path(out).expanduser().resolve()
        if dry_run:
            _print_plan(plan_only(plan), plan)
            return
        with crashes_into(plan.root):  # a bug outside the stages: its crash.log in the pipeline's out dir
            result = execute(plan, set(force_stage))
    except (PipelineError, StageError) as exc:
        fail(" ".join(str(exc).split()))
    print_outcome(result)
    raise typer.Exit(EXIT_CODES[result.status])


EXIT_CODES = {"passed": 0, "rejected": 1, "failed": 3}


def execute(plan: Any, force: set[str] | None = None) -> Any:
    """Run a loaded plan with the live stage board (plain lines when not a terminal)."""
    from tempering.pipeline.runner import run_pipeline
    from tempering.train.metrics import console

    if console.is_terminal:
        board = StageBoard(plan.stages)
        with Live(
            get_renderable=board.render,
            console=console,
            refresh_per_second=2,
            transient=False,
            redirect_stdout=False,
            redirect_stderr=True,
        ):
            return run_pipeline(plan, force or set(), events=board, console=console)
    return run_pipeline(plan, force or set(), events=StageBoard(plan.stages, plain=console), console=console)


def _print_plan(rows: list[dict[str, Any]], plan: Any) -> None:
    from rich.table import Column

    from tempering.tables import print_wide

    table = Table(
        "stage",
        "kind",
        "hash",
        "status",
        Column("run dir", overflow="fold"),  # a narrow terminal folds a path, never cuts it
        title=f"plan of {plan.path} (run root {plan.root})",
        title_justify="left",
    )
    for r in rows:
        table.add_row(r["stage"], r["kind"], (r["hash"] or "?")[:12], r["status"], r["run_dir"] or "")
    print_wide(Console(), table)  # piped (`| cat`, CI logs): the table's natural width


def print_outcome(result: Any, rule_prefix: str = "", json_line: bool = True) -> None:
    """Failed stages, the gate's rules (each line starting with `rule_prefix`), the status line,
    and (with `json_line`) the machine-readable result as the last stdout line."""
    out = Console()
    for o in result.stages:
        if o.status == "failed":
            err.print(f"[red]error:[/red] stage {o.name} failed: {escape(_failure(o))}", highlight=False)
        if o.kind == "gate" and o.summary:
            for rule in o.summary.get("rules", []):
                mark = "[green]PASS[/green]" if rule.get("passed") else "[red]FAIL[/red]"
                out.print(
                    f"{rule_prefix}{mark} {rule.get('rule')}: {rule.get('detail')}", highlight=False, soft_wrap=True
                )
    line = {
        "passed": "[green]pipeline passed[/green]",
        "rejected": "[bold red]pipeline rejected by its gate; later stages did not run[/bold red]",
        "failed": "[red]pipeline failed[/red]",
    }[result.status]
    for a in getattr(result, "attempts", []):
        actions = "; ".join(a.get("actions", []))
        out.print(
            f"attempt {a['attempt']}: {a['status']}"
            + (f" (failed: {'; '.join(a['failed_rules'])})" if a["failed_rules"] else "")
            + (f" -> {actions}" if actions else ""),
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    out.print(line)
    if json_line:
        print(
            json.dumps(
                {
                    "status": result.status,
                    "run_id": result.run_id,
                    "stages": {
                        o.name: {
                            "status": o.status,
                            "hash": o.hash,
                            "run_dir": str(o.run_dir) if o.run_dir else None,
                            "outputs": o.outputs,
                            **({"crash_log": str(o.crash_log)} if getattr(o, "crash_log", None) else {}),
                        }
                        for o in result.stages
                    },
                    **({"attempts": result.attempts} if getattr(result, "attempts", None) else {}),
                }
            )
        )


def _failure(outcome: Any) -> str:
    """A failed stage's error; a bug (it left a crash log) says so and names the log."""
    if getattr(outcome, "crash_log", None):
        return f"{INTERNAL}: {outcome.error} — traceback in {outcome.crash_log}"
    return str(outcome.error)


def demo(
    pipeline: Optional[Path] = typer.Option(
        None,
        "--pipeline",
        help="The demo pipeline (default: examples/demo.yaml here, else in the Tempering source tree).",
    ),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Run root (default: the file's `out`, runs/demo)."),
) -> None:
    """The main job, small: eval -> flywheel data -> SFT -> GRPO -> eval -> gate -> release, then before/after."""
    from tempering.cli.pipeline import EXIT_CODES, execute, print_outcome
    from tempering.errors import crashes_into
    from tempering.pipeline.runner import PipelineError, load_plan
    from tempering.recipes.demo import DemoError, demo_pipeline, summarize
    from tempering.runs.stage import StageError
    from tempering.train.metrics import console

    try:
        plan = load_plan(demo_pipeline(pipeline))
        if out is not None:
            plan.root = Path(out).expanduser().resolve()
        console.rule(f"[bold]Tempering demo: the closed loop on the default model ({plan.path})")
        with crashes_into(plan.root):
            result = execute(plan)
    except (DemoError, PipelineError, StageError) as exc:
        fail(" ".join(str(exc).split()))
    print_outcome(result, rule_prefix="gate ", json_line=False)
    summarize(result, plan.root, console)
    raise typer.Exit(EXIT_CODES[result.status])
