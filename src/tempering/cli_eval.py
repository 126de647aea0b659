"""`temper eval run | compare` and `temper data decontam`: each parses its flags and calls one function.

Registered in `tempering.cli`: `app.add_typer(eval_app, name="eval")` and
`data_app.command("decontam")(data_decontam)`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from tempering.config import DEFAULT_MODEL

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
eval_app = typer.Typer(help="Evaluate: run suites on a model, compare two results, gate a release.",
                       no_args_is_help=True)
out = Console()
err = Console(stderr=True)


def _fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


@eval_app.command("run")
def eval_run(
    suites: List[str] = typer.Argument(..., help="Suite names (built-in or user suite dirs) or suite YAML paths."),
    model: str = typer.Option(DEFAULT_MODEL, help="Model spec: alias, HF dir, run output (runs/NAME/final), .gguf."),
    out_dir: Path = typer.Option(..., "--out", help="Writes results.json and report.html here."),
    seeds: Optional[int] = typer.Option(None, help="Sampling seeds, each a full repeat (default: the suite's)."),
    first_seed: int = typer.Option(0, help="Seeds are first_seed .. first_seed + seeds - 1."),
    samples: Optional[int] = typer.Option(None, help="Samples per task per seed (default: the suite's)."),
    limit: Optional[int] = typer.Option(None, help="At most this many tasks per task source (a subset: own suite hash)."),
    cache: bool = typer.Option(True, "--cache/--no-cache", help="Reuse results cached under ~/.cache/tempering/evals."),
    threads: Optional[int] = typer.Option(None, help="torch intra-op threads (default: torch's)."),
    precision: str = typer.Option("auto", help="auto | bf16 | fp32 (auto: bf16 only where it is native)."),
) -> None:
    """Evaluate a model on suites; contamination is scanned along the checkpoint's training lineage."""
    from tempering.evals.suite import SuiteError, load_suite

    try:
        loaded = [load_suite(s).with_overrides(seeds=seeds, samples=samples, limit=limit) for s in suites]
        for s in loaded:
            s.check_samples()
    except SuiteError as exc:
        _fail(str(exc))
    names = [s.name for s in loaded]
    if len(set(names)) != len(names):
        _fail(f"a suite is listed twice: {names}")
    results = evaluate_model(model, loaded, out_dir, first_seed=first_seed, cache=cache, threads=threads,
                             precision=precision)
    from tempering.evals.report import print_table

    print_table(results, console=out)
    out.print(f"results: {out_dir / 'results.json'}  report: {out_dir / 'report.html'}")


def evaluate_model(model: str, suites: list, out_dir: Path, *, first_seed: int = 0, cache: bool = True,
                   threads: int | None = None, precision: str = "auto"):
    """Load `model`, scan its lineage, run every suite, write results.json + report.html; returns the results."""
    import torch

    from tempering.evals.cache import default_cache_dir, model_dir_hash
    from tempering.evals.leakage import contaminated_rows, training_lineage
    from tempering.evals.report import render_report
    from tempering.evals.results import EvalResults
    from tempering.evals.runner import run_suite
    from tempering.models.load import ModelNotFound, load_model, load_tokenizer
    from tempering.rollout.engine import HFEngine

    if threads:
        torch.set_num_threads(threads)
    lineage = training_lineage(model)
    for recorded in lineage.missing:
        err.print(f"[yellow]warning: training input {recorded} is gone; it could not be scanned[/yellow]")
    for recorded in lineage.changed:
        err.print(f"[yellow]warning: training input {recorded} changed since training; scanned as it is now[/yellow]")
    rows = contaminated_rows(lineage.files, suites)
    if lineage.runs:
        found = sum(len(r) for r in rows.values())
        err.print(f"[dim]lineage: {' <- '.join(lineage.runs)}; {len(lineage.files)} training file(s) scanned, "
                  f"{found} contaminated row(s)[/dim]")
    try:
        engine = HFEngine(load_model(model), load_tokenizer(model), precision=precision)
    except ModelNotFound as exc:
        _fail(str(exc))
    try:
        model_hash = model_dir_hash(model)
    except ModelNotFound:  # a hub id: the runner hashes the loaded weights instead
        model_hash = None
    out_suites = []
    for suite in suites:
        result = run_suite(suite, engine, first_seed=first_seed, model_id=model, model_hash=model_hash,
                           cache_dir=default_cache_dir() if cache else None,
                           log=lambda line: err.print(f"[dim]{line}[/dim]"))
        out_suites.append(result.model_copy(update={"contaminated_rows": rows[suite.name],
                                                    "contamination_hits": len(rows[suite.name])}))
    results = EvalResults(model=model, suites=out_suites)
    results.save(Path(out_dir) / "results.json")
    render_report(results, out_dir)
    return results


def _load_results(path: Path):
    from tempering.evals.results import EvalResults

    return EvalResults.load(path / "results.json" if path.is_dir() else path)


@eval_app.command("compare")
def eval_compare(
    base: Path = typer.Argument(..., help="Base results (results.json or the directory holding it)."),
    candidate: Path = typer.Argument(..., help="Candidate results (results.json or its directory)."),
    gate: Optional[Path] = typer.Option(None, help="Gate rules YAML; exit 1 when any rule fails."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Write report.html (candidate vs base) here."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
) -> None:
    """Paired bootstrap per suite (candidate - base), the significance of each delta, and the gate."""
    from tempering.evals.gate import GateRuleError, load_rules, run_gate
    from tempering.evals.report import print_table, render_report

    try:
        a, b = _load_results(base), _load_results(candidate)
        rules = load_rules(gate) if gate is not None else None
        print_table(b, compare=a, console=out)
        if out_dir is not None:
            out.print(f"report: {render_report(b, out_dir, compare=a)}")
        if rules is None:
            return
        verdict = run_gate(rules, a, b, seed=seed)
    except (FileNotFoundError, ValueError, GateRuleError) as exc:
        _fail(str(exc))
    for check in verdict.rules:
        mark = "[green]PASS[/green]" if check.passed else "[red]FAIL[/red]"
        out.print(f"{mark} {check.rule}: {check.detail}", highlight=False)
    if out_dir is not None:
        (Path(out_dir) / "gate.json").write_text(json.dumps(verdict.to_dict(), indent=1))
    out.print("[green]gate passed[/green]" if verdict.passed else "[red]gate failed[/red]")
    raise typer.Exit(0 if verdict.passed else 1)


def data_decontam(
    data: Path = typer.Argument(..., help="Training data (JSONL / JSON / Parquet)."),
    against: List[str] = typer.Option(..., "--against", help="Suites to check against: names or YAML paths, "
                                      "comma-separated or repeated."),
    out_path: Optional[Path] = typer.Option(None, "-o", "--out", help="Write the rows that match no suite here "
                                            "(JSONL); without it, only report (exit 1 when rows match)."),
) -> None:
    """Find (and with -o remove) training rows that contain eval suite tasks; prints one JSON summary."""
    from tempering.evals.contamination import decontaminate
    from tempering.evals.leakage import suite_index
    from tempering.evals.suite import SuiteError, load_suite

    try:
        suites = [load_suite(name.strip()) for item in against for name in item.split(",") if name.strip()]
        index = suite_index(suites)
        if out_path is not None:
            report = decontaminate(index, data, out_path)
            hits, kept = report.hits, report.kept
        else:
            hits, kept = index.scan_file(data), None
    except (SuiteError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    print(json.dumps({**decontam_summary(hits), "kept": kept, "written": str(out_path) if out_path else None}))
    raise typer.Exit(1 if hits and out_path is None else 0)


def decontam_summary(hits) -> dict:
    """Rows matched per suite; task ids only for public suites (private ones: counts)."""
    by_suite: dict[str, int] = {}
    rows = []
    for hit in hits:
        suites = list(dict.fromkeys(m.suite for m in hit.matches))
        for s in suites:
            by_suite[s] = by_suite.get(s, 0) + 1
        tasks = sorted({m.task_id for m in hit.matches if not m.private})
        rows.append({"row": hit.row_id, "suites": suites, "public_tasks": tasks})
    return {"matched_rows": len(hits), "by_suite": by_suite, "rows": rows}
