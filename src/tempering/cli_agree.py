"""`temper data pairs | agree | audit`: build preference pairs, measure their agreement, audit them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.table import Table

from tempering.cli_common import err, fail
from tempering.config import ConfigError, PairsConfig, load_config


def data_pairs(
    config: Optional[Path] = typer.Argument(None, help="Optional YAML (PairsConfig); flags and --set override it."),
    out_file: Optional[str] = typer.Option(None, "--out", help="Pair JSONL to write (replaced)."),
    model: Optional[str] = typer.Option(None, help="Generator model spec (default: the default model)."),
    source: Optional[str] = typer.Option(None, help="Task source (default builtin:arithmetic)."),
    n: Optional[int] = typer.Option(None, help="Tasks to sample."),
    split: Optional[str] = typer.Option(None, help="builtin:arithmetic split: train | heldout (disjoint)."),
    ops: Optional[str] = typer.Option(None, help="builtin:arithmetic operations, e.g. '+' or '+-*'."),
    task_seed: Optional[int] = typer.Option(None, help="Seed of the built-in task generator."),
    k: Optional[int] = typer.Option(None, help="Candidates sampled per task."),
    seed: Optional[int] = typer.Option(None, help="Sampling seed."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set sampling.temperature=0.8."),
    runs: Optional[str] = typer.Option(None, help="Run root where the generation is recorded (default runs)."),
    name: Optional[str] = typer.Option(None, help="Run name (default pairs-<timestamp>)."),
    threads: Optional[int] = typer.Option(None, help="torch threads."),
    force: bool = typer.Option(False, "--force", help="Re-use a run name even though the config changed."),
) -> None:
    """Verifier-built preference pairs from a model's own samples; ends with one JSON line."""
    flags = {"output": out_file, "model": model, "tasks.source": source, "tasks.n": n, "tasks.split": split,
             "tasks.ops": ops, "tasks.seed": task_seed, "k": k, "seed": seed, "out": runs, "name": name,
             "threads": threads}
    try:
        cfg = load_config(PairsConfig, config, list(set_), {k_: v for k_, v in flags.items() if v is not None})
    except (ConfigError, FileNotFoundError) as exc:
        fail(str(exc))
    from tempering.recipes.pairs import run_pairs

    try:
        summary = run_pairs(cfg, console=err, force=force)
    except (ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    table = Table(title=f"verifier-built pairs -> {summary['output']}")
    for col in ("tasks", "samples", "strict", "sloppy", "wrong", "pairs_correct", "pairs_strict", "reformatted"):
        table.add_column(col, justify="right")
    table.add_row(*(str(summary.get(c, "")) for c in ("tasks", "samples", "strict", "sloppy", "wrong",
                                                      "pairs_correct", "pairs_strict", "reformatted")))
    err.print(table)
    print(json.dumps({k_: summary.get(k_) for k_ in ("tasks", "samples", "judged", "strict", "sloppy", "wrong",
                                                     "tasks_with_correct", "tasks_paired", "pairs", "pairs_correct",
                                                     "pairs_strict", "reformatted", "output", "run_id", "seconds")}))
