"""`temper eval run | compare | show` and `temper verify`: each parses its flags and calls one function."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console

from tempering.atomic import write_text_atomic
from tempering.cli.common import err, fail
from tempering.cli.eval_show import eval_show
from tempering.config import DEFAULT_MODEL, ConfigError, load_config

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


eval_app = typer.Typer(
    help="Evaluate: run suites on a model, compare two results, gate a release.", no_args_is_help=True
)


PIPE_WIDTH = 200  # columns of tables written to a pipe or file


def stdout_console() -> Console:
    """Standard output; when it is no terminal (`| tee`), wide enough that rich never cuts a
    table's columns (it would assume 80), unless $COLUMNS says otherwise."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        return Console()
    return Console(width=PIPE_WIDTH)


def _one_line(message: object) -> str:
    return " ".join(str(message).split())


@eval_app.command("run")
def eval_run(
    suites: Optional[List[str]] = typer.Argument(
        None, help="Suite names (built-in or user suite dirs) or suite YAML paths (default: the config's)."
    ),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="EvalConfig YAML; the flags below override it."),
    model: Optional[str] = typer.Option(
        None, help=f"Model spec: alias, HF dir, run output (runs/NAME/final), .gguf (default {DEFAULT_MODEL})."
    ),
    out_dir: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Writes results.json, samples.jsonl and report.html here."
    ),
    seeds: Optional[int] = typer.Option(None, help="Sampling seeds, each a full repeat (default: the suite's)."),
    first_seed: Optional[int] = typer.Option(None, help="Seeds are first_seed .. first_seed + seeds - 1 (default 0)."),
    samples: Optional[int] = typer.Option(None, help="Samples per task per seed (default: the suite's)."),
    limit: Optional[int] = typer.Option(
        None, help="At most this many tasks per task source (a subset: own suite hash)."
    ),
    cache: Optional[bool] = typer.Option(
        None, "--cache/--no-cache", help="Reuse results cached under ~/.cache/tempering/evals (default: on)."
    ),
    threads: Optional[int] = typer.Option(None, help="torch intra-op threads (default: torch's)."),
    precision: Optional[str] = typer.Option(None, help="auto | bf16 | fp32 (auto: bf16 only where it is native)."),
    quantize: Optional[str] = typer.Option(None, help="none | int8: evaluate the weight-only int8 copy."),
    overrides: Optional[List[str]] = typer.Option(None, "--set", help="Config override key=value (repeatable)."),
) -> None:
    """Evaluate a model on suites; contamination is scanned along the checkpoint's training lineage."""
    from tempering.config import EvalConfig

    flags = {
        "suites": suites or None,
        "model": model,
        "out": str(out_dir) if out_dir else None,
        "seeds": seeds,
        "first_seed": first_seed,
        "samples": samples,
        "limit": limit,
        "cache": cache,
        "threads": threads,
        "precision": precision,
        "quantize": quantize,
    }
    try:
        cfg = load_config(
            EvalConfig, config, list(overrides or []), literal={k: v for k, v in flags.items() if v is not None}
        )
    except (ConfigError, OSError) as exc:
        fail(_one_line(exc) + " (flags override the config file)")
    from tempering.errors import crashes_into

    with crashes_into(cfg.out):  # a bug's crash.log goes beside the results it was writing
        _evaluate(cfg)


def _evaluate(cfg: Any) -> None:
    """Run the config's suites (agent suites included) and print the table."""
    from tempering.errors import UserError
    from tempering.evals.evaluate import evaluate_config
    from tempering.evals.report import print_table

    try:
        results = evaluate_config(
            cfg,
            warn=lambda line: err.print(f"[yellow]warning: {line}[/yellow]"),
            log=lambda line: err.print(f"[dim]{line}[/dim]"),
        )
    except UserError as exc:  # a suite's problems may span lines
        fail(_one_line(exc))

    print_table(results, console=stdout_console())
    for suite in results.suites:
        for note in suite.notes:
            stdout_console().print(f"note: {suite.suite}: {note}", highlight=False)
    stdout_console().print(
        f"results: {Path(cfg.out) / 'results.json'}  samples: {Path(cfg.out) / 'samples.jsonl'}  "
        f"report: {Path(cfg.out) / 'report.html'}"
    )


def _load_results(path: Path):
    from tempering.evals.results import EvalResults

    return EvalResults.load(path / "results.json" if path.is_dir() else path)


@eval_app.command("compare")
def eval_compare(
    base: Path = typer.Argument(..., help="Base results (results.json or the directory holding it)."),
    candidate: Path = typer.Argument(..., help="Candidate results (results.json or its directory)."),
    gate: Optional[Path] = typer.Option(None, help="Gate rules YAML; exit 1 when any rule fails."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Write report.html (candidate vs base) here."),
    seed: int = typer.Option(0, help="Bootstrap seed."),
) -> None:
    """Paired bootstrap per suite (candidate - base), the significance of each delta, and the gate."""
    from tempering.evals.gate import load_rules, run_gate
    from tempering.evals.report import print_table, render_report

    a, b = _load_results(base), _load_results(candidate)
    rules = load_rules(gate) if gate is not None else None
    print_table(b, compare=a, console=stdout_console(), seed=seed)
    if out_dir is not None:
        stdout_console().print(f"report: {render_report(b, out_dir, compare=a, seed=seed)}")
    if rules is None:
        return
    verdict = run_gate(rules, a, b, seed=seed)
    for check in verdict.rules:
        mark = "[green]PASS[/green]" if check.passed else "[red]FAIL[/red]"
        stdout_console().print(f"{mark} {check.rule}: {check.detail}", highlight=False)
    if out_dir is not None:
        write_text_atomic(Path(out_dir) / "gate.json", json.dumps(verdict.to_dict(), indent=1))
    stdout_console().print("[green]gate passed[/green]" if verdict.passed else "[red]gate failed[/red]")
    raise typer.Exit(0 if verdict.passed else 1)


def verify(
    task: Path = typer.Option(..., "--task", help="One task as JSON (the task JSONL row format)."),
    completion: Path = typer.Option(..., "--completion", help="A file holding the completion text."),
) -> None:
    """Score a completion with the task's verifier; the Reward JSON is the last line."""
    from pydantic import ValidationError

    from tempering.types import Task
    from tempering.verifiers import UnknownVerifier, score

    for path, what in ((task, "task"), (completion, "completion")):
        if not path.is_file():
            fail(f"{path}: {what} file not found (--{what})")
    try:
        parsed = Task.model_validate_json(task.read_text(encoding="utf-8"))
    except ValidationError as exc:
        fail(f"{task}: invalid task: {exc.errors()[0]['msg']}")
    except UnicodeDecodeError as exc:
        fail(f"{task}: not UTF-8 text ({exc.reason} at byte {exc.start})")
    from tempering.errors import UserError
    from tempering.sandbox import SandboxUnavailable
    from tempering.verifiers import VerifierError
    from tempering.verifiers.base import spec_problem

    problem = spec_problem(parsed.verifier)
    if problem is not None:  # a spec no completion could be scored against
        fail(f"{task}: {problem}")

    try:
        text = completion.read_text(encoding="utf-8", errors="replace")
        reward = score(parsed, text)
    except UnknownVerifier as exc:
        fail(str(exc.args[0]))
    except KeyError as exc:  # the spec lacks a field its verifier needs (e.g. numeric without answer)
        fail(
            f"{task}: the {parsed.verifier.get('type')!r} verifier spec needs the field {exc.args[0]!r}; "
            f'add it to "verifier"'
        )
    except UserError as exc:  # the spec is malformed (an answer that is no number, a negative tolerance)
        fail(f"{task}: bad {parsed.verifier.get('type')!r} verifier spec: {exc}")
    except (VerifierError, SandboxUnavailable) as exc:
        fail(f"the verifier could not judge (not the completion's fault): {exc}", code=3)
    print(reward.model_dump_json())


eval_app.command("show")(eval_show)
