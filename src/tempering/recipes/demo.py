"""`make demo` / `temper demo`: the closed loop, small, then what changed.

The demo is an ordinary pipeline (`examples/demo.yaml`: eval first -> flywheel data -> LoRA SFT
-> GRPO -> eval -> gate -> release) run by `temper run`'s runner; this module finds that file
and, once the pipeline is done, reads its first and last eval stages and shows the
before/after table (paired deltas with CIs), the gate's rules, the release, one example
reply, and the comparison report as HTML and as a headless-Chromium screenshot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console

from tempering.errors import UserError

DEMO_PIPELINE = Path("examples") / "demo.yaml"


class DemoError(UserError):
    """The demo cannot start (its pipeline file is missing); one line for the user."""


def demo_pipeline(path: Path | None = None) -> Path:
    """The demo's pipeline: `path`, else examples/demo.yaml here, else in the Tempering source tree."""
    if path is not None:
        if not path.is_file():
            raise DemoError(f"{path}: demo pipeline not found")
        return path
    for candidate in (DEMO_PIPELINE, Path(__file__).resolve().parents[3] / DEMO_PIPELINE):
        if candidate.is_file():
            return candidate
    raise DemoError(f"the demo needs {DEMO_PIPELINE}: run it from a Tempering checkout or pass --pipeline")


def summarize(result: Any, root: Path, console: Console) -> dict[str, Any]:
    """Before/after table, release and report of a finished demo pipeline.

    Returns where the report and its screenshot are: {"status", "report", "screenshot"}.
    """
    from tempering.evals.report import print_table, render_report
    from tempering.evals.results import EvalResults

    evals = [o for o in result.stages if o.kind == "eval" and o.outputs.get("results")]
    shown: dict[str, Any] = {"status": result.status}
    if len(evals) < 2:
        console.print("[yellow]no before/after: the pipeline stopped before its second eval[/yellow]")
        return shown
    before, after = (EvalResults.load(o.outputs["results"]) for o in (evals[0], evals[-1]))
    console.rule(f"[bold]before ({evals[0].name}) / after ({evals[-1].name})")
    print_table(after, compare=before, console=console)  # the paired deltas with their CIs
    example = _example(evals[0].run_dir, evals[-1].run_dir)
    if example:
        console.print(
            f"example: {example['prompt']!r}\n  before: {example['before']!r}\n  after:  {example['after']!r}"
        )
    for o in result.stages:  # the gate's rules were printed with the pipeline's outcome
        if o.kind == "release" and o.summary:
            console.print(
                f"release: {json.dumps(o.summary.get('release', o.summary), default=str)[:300]}",
                soft_wrap=True,
                highlight=False,
            )
    report = render_report(after, root / "report", compare=before)
    shown["report"] = str(report)
    console.print(f"report: {report}", soft_wrap=True, highlight=False)
    shown["screenshot"] = _screenshot(report, console)
    return shown


def _example(before_dir: Path | None, after_dir: Path | None) -> dict[str, str] | None:
    """The first task's reply before and after, from the eval stages' samples.jsonl."""

    def first(run_dir: Path | None) -> dict[str, Any] | None:
        path = next(iter(sorted(Path(run_dir).rglob("samples.jsonl"))), None) if run_dir else None
        if path is None:
            return None
        with path.open(encoding="utf-8") as f:
            return json.loads(f.readline() or "null")

    b, a = first(before_dir), first(after_dir)
    if not b or not a or "completion" not in b or "completion" not in a:
        return None
    return {"prompt": str(b.get("prompt", b.get("task_id", ""))), "before": b["completion"], "after": a["completion"]}


def _screenshot(report: Path, console: Console) -> str | None:
    from tempering.evals.screenshot import pixel_stats, screenshot

    try:
        png = screenshot(report, report.with_suffix(".png"), height=2400)
    except (FileNotFoundError, RuntimeError, OSError) as exc:
        console.print(f"[yellow]no screenshot: {' '.join(str(exc).split())[:200]}[/yellow]")
        return None
    stats = pixel_stats(png)
    verdict = "looks blank" if stats.looks_blank() else "ok"
    console.print(f"screenshot: {png} ({stats.width}x{stats.height}, {verdict})", soft_wrap=True, highlight=False)
    return str(png)
