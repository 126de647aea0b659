"""`temper rm CONFIG.yaml` (train a reward model) and `temper best-of-n` (rank samples with one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from tempering.cli_common import FORCE, FULL, NAME, OUT, STEPS, err, fail, train_from_config


def rm(
    config: Path = typer.Argument(..., help="YAML config (see examples/rm.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set rm.margin=0.5 (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Base model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    force: bool = FORCE,
) -> None:
    """Reward model (Bradley-Terry) on preference pairs; held-out pairwise accuracy with a CI."""
    from tempering.config import RMConfig
    from tempering.recipes.rm import run_rm

    literal = {"model": model, "train.steps": steps, "out": out_dir, "name": name}
    summary = train_from_config(RMConfig, run_rm, config, set_, literal, full, force)
    print(json.dumps(summary))


def best_of_n_cmd(
    reward_model: str = typer.Option(..., "--reward-model", help="A `temper rm` output (runs/NAME/final)."),
    policy: Optional[str] = typer.Option(None, help="Model that samples the candidates (default: the default model)."),
    tasks: str = typer.Option("builtin:arithmetic", help="Task source: builtin:arithmetic, humaneval, a task JSONL."),
    limit: int = typer.Option(50, help="Tasks to answer."),
    split: str = typer.Option("heldout", help="builtin generators: train | heldout."),
    n: int = typer.Option(8, "-n", help="Candidates per task."),
    temperature: float = typer.Option(0.7, help="Sampling temperature of the candidates."),
    max_tokens: int = typer.Option(32, help="Most tokens per candidate."),
    seed: int = typer.Option(0, help="Sampling seed."),
    out: Optional[Path] = typer.Option(None, help="Write per-task records (answers, scores, pick) as JSONL."),
    precision: str = typer.Option("auto", help="auto | bf16 | fp32."),
) -> None:
    """Sample n answers per task and keep the one the reward model ranks highest; the task's own
    verifier measures the pick against a random sample and the oracle (last line: JSON)."""
    from pydantic import ValidationError

    from tempering.config import DEFAULT_MODEL, BestOfNSettings, TaskSourceSettings

    try:
        settings = BestOfNSettings(policy=policy or DEFAULT_MODEL, n=n, seed=seed, temperature=temperature,
                                   max_new_tokens=max_tokens,
                                   tasks=TaskSourceSettings(source=tasks, n=limit, split=split))
    except ValidationError as exc:
        e = exc.errors()[0]
        fail(f"{'.'.join(map(str, e['loc']))}: {e['msg']}")
    from tempering.models.reward import NotARewardModel
    from tempering.recipes.best_of_n import run_best_of_n

    try:
        summary = run_best_of_n(settings, reward_model, precision, out)
    except (NotARewardModel, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    err.print(f"best-of-{n} on {summary['tasks']} tasks: RM pick {summary['rm_pick']:.1%}, random sample "
              f"{summary['random_pick']:.1%}, any correct (oracle) {summary['oracle']:.1%}")
    print(json.dumps(summary))
