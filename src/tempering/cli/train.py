"""The training commands: one per registered objective (sft, grpo, agent, dpo, rm, distill and
any plug-in, all from `training_command`), then best-of-n and merge.

Each reads its config, applies the flags, runs one recipe and prints one summary JSON line."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.console import Console

from tempering.cli.common import FORCE, FULL, NAME, OUT, STEPS, err, fail, refuse_flag_keys, train_from_config
from tempering.config import DEFAULT_MODEL, ConfigError, load_config
from tempering.recipes.registry import Registration, load_plugins, resolve

out = Console()


def training_command(entry: Registration) -> Callable[..., None]:
    """The `temper NAME CONFIG` command of one registered objective: its config file with
    `--set` values and the flags applied, the run, and the summary as one JSON line (rank 0 only)."""
    model_key = entry.models[0] if entry.models else None
    params = [
        _param("config", Path, typer.Argument(..., help=f"YAML config (see {entry.example}).")),
        _param(
            "set_",
            List[str],
            typer.Option([], "--set", help=f"Override any field: --set {entry.set_example} (repeatable)."),
        ),
    ]
    if model_key:
        help_ = "Model spec (alias, HF dir, .gguf, run output, hub id)."
        params.append(_param(model_key.replace(".", "_"), Optional[str], typer.Option(None, help=help_)))
    params += [_param(f.name, Optional[f.type], typer.Option(None, help=f.help)) for f in entry.flags]
    params += [_param("steps", Optional[int], STEPS), _param("out_dir", Optional[str], OUT)]
    params.append(_param("name", Optional[str], NAME))
    if entry.full_flag:
        params.append(_param("full", bool, FULL))
    if entry.dry_run:
        dry_help = (
            "Show the resolved config, row and token counts and one rendered example with its loss mask; "
            "train nothing, create no run."
        )
        params.append(_param("dry_run", bool, typer.Option(False, "--dry-run", help=dry_help)))
    resume_help = "Resume from this checkpoint dir (runs/NAME/checkpoints/step-N or runs/NAME@step-N)."
    params.append(_param("resume_from", Optional[str], typer.Option(None, "--resume-from", help=resume_help)))
    params.append(_param("force", bool, FORCE))

    def command(**kw: Any) -> None:
        from tempering.train.distributed import world

        literal = {"train.steps": kw["steps"], "out": kw["out_dir"], "name": kw["name"]}
        literal["train.resume_from"] = kw["resume_from"]
        if model_key:
            literal[model_key] = kw[model_key.replace(".", "_")]
        literal.update({f.key: kw[f.name] for f in entry.flags})
        run = entry.runner()
        if kw.get("dry_run") and entry.dry_run:  # the flag exists only with a dry run
            dry = resolve(entry.dry_run)
            run = lambda cfg, force=False: dry(cfg, out)  # noqa: E731
        summary = train_from_config(
            entry.config_class(), run, kw["config"], kw["set_"], literal, kw.get("full", False), kw["force"]
        )
        if world().main:  # under torchrun, rank 0 speaks for the run
            print(json.dumps(summary))

    command.__name__ = entry.name.replace("-", "_")
    command.__doc__ = entry.help
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


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
    out: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Write per-task records (answers, scores, pick) as JSONL."
    ),
    precision: str = typer.Option("auto", help="auto | bf16 | fp32."),
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="Setting key=value (repeatable), e.g. engine.kind=speculative engine.draft.model=DIR."
    ),
) -> None:
    """Sample n answers per task and keep the one the reward model ranks highest; the task's own
    verifier measures the pick against a random sample and the oracle (last line: JSON)."""
    from tempering.config import BestOfNSettings, load_config

    if precision not in ("auto", "bf16", "fp32"):
        fail(f"--precision must be auto, bf16 or fp32, not {precision!r}")
    flags = dict(
        policy=policy or DEFAULT_MODEL,
        n=n,
        seed=seed,
        temperature=temperature,
        max_new_tokens=max_tokens,
        tasks={"source": tasks, "n": limit, "split": split},
    )
    refuse_flag_keys(overrides or [], flags)
    try:
        settings = load_config(BestOfNSettings, None, list(overrides or []), literal=flags)
    except ConfigError as exc:
        fail(exc)
    from tempering.recipes.best_of_n import run_best_of_n

    summary = run_best_of_n(settings, reward_model, precision, out)
    err.print(
        f"best-of-{n} on {summary['tasks']} tasks: RM pick {summary['rm_pick']:.1%}, random sample "
        f"{summary['random_pick']:.1%}, any correct (oracle) {summary['oracle']:.1%}"
    )
    print(json.dumps(summary))


def merge(
    config: Path = typer.Argument(..., help="YAML config (inputs, weights, method; see docs/merge.md)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set method=ties (repeatable)."),
    out_dir: Optional[str] = typer.Option(None, "--out", "-o", help="Run root."),
    name: Optional[str] = typer.Option(None, help="Run name."),
    merged_model: bool = typer.Option(False, "--merged-model", help="Adapters: also write a standalone merged model."),
) -> None:
    """Merge trained tracks: LoRA adapters with PEFT (linear, cat, svd, ties, dare), full models with
    mergekit; checks the tokenizer round trip and records the merge (last line: JSON summary)."""
    from tempering.config import MergeConfig

    literal: dict[str, Any] = {k: v for k, v in (("out", out_dir), ("name", name)) if v is not None}
    if merged_model:
        literal["merged_model"] = True
    cfg = load_config(MergeConfig, config, list(set_), literal)
    from tempering.errors import UserError
    from tempering.recipes.merge import run_merge

    try:
        summary = run_merge(cfg)
    except UserError as exc:  # MergeError, StageError, a bad model spec: named with the config that asked
        fail(f"{config}: {exc}")
    print(json.dumps(summary))


def command_name(objective: str) -> str:
    """An objective's name on the command line: words joined by `-`, as every command's
    (`vision_sft` is `temper vision-sft`; the objective and its pipeline stage kind keep `_`)."""
    return objective.replace("_", "-")


def commands() -> dict[str, Callable[..., None]]:
    """Every training command by its name on the command line: one per registered objective
    (`recipes.registry`, plug-ins included), then best-of-n and merge."""
    generated = {command_name(name): training_command(entry) for name, entry in load_plugins().items()}
    return {**generated, "best-of-n": best_of_n_cmd, "merge": merge}


def retired_names() -> dict[str, str]:
    """The names objectives had on the command line before `command_name` (old -> new)."""
    return {name: command_name(name) for name in load_plugins() if command_name(name) != name}
