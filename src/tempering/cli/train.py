"""The training commands: sft, grpo, agent, dpo, rm, best-of-n, distill, merge.

Each reads its config, applies the flags, runs one recipe and prints one summary JSON line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.console import Console

from tempering.cli.common import FORCE, FULL, NAME, OUT, STEPS, err, fail, refuse_flag_keys, train_from_config
from tempering.config import DEFAULT_MODEL, ConfigError, DPOConfig, SFTConfig, load_config

out = Console()


def sft(
    config: Path = typer.Argument(..., help="YAML config (see examples/sft_demo.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set train.steps=20 (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Show the resolved config, row and token counts and "
        "one rendered example with its loss mask; train nothing, create no run.",
    ),
    force: bool = FORCE,
) -> None:
    """Supervised fine-tuning on conversations (assistant-only loss)."""
    from tempering.recipes.sft import run_sft
    from tempering.recipes.sft_dry_run import dry_run_sft

    run = (lambda cfg, force=False: dry_run_sft(cfg, out)) if dry_run else run_sft
    _train(SFTConfig, run, config, set_, model, steps, out_dir, name, full, force)


def _train(
    kind: type,
    run: Any,
    config: Path,
    set_: List[str],
    model: Optional[str],
    steps: Optional[int],
    out_dir: Optional[str],
    name: Optional[str],
    full: bool,
    force: bool = False,
) -> None:
    """Shared body of sft and grpo: config + flags -> run -> summary JSON."""
    from tempering.train.distributed import world

    literal = {"model": model, "train.steps": steps, "out": out_dir, "name": name}
    summary = train_from_config(kind, run, config, set_, literal, full, force)
    if world().main:  # under torchrun, rank 0 speaks for the run
        out.print_json(json.dumps(summary))


def grpo(
    config: Path = typer.Argument(..., help="YAML config (see examples/grpo_arith.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set grpo.group_size=4 (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    force: bool = FORCE,
) -> None:
    """RL with verifiable rewards (GRPO family): sample, verify, update."""
    from tempering.config import GRPOConfig
    from tempering.recipes.grpo import run_grpo

    _train(GRPOConfig, run_grpo, config, set_, model, steps, out_dir, name, full, force)


def agent(
    config: Path = typer.Argument(..., help="YAML config (see examples/agent/agent_arith.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set rl.group_size=4 (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    force: bool = FORCE,
) -> None:
    """Agent training in tool environments: expert SFT, then trajectory-level GRPO (docs/agents.md)."""
    from tempering.agents.config import AgentConfig
    from tempering.recipes.agent import run_agent

    _train(AgentConfig, run_agent, config, set_, model, steps, out_dir, name, full, force)


stdout = Console(soft_wrap=True, highlight=False)


def dpo(
    config: Path = typer.Argument(..., help="YAML config (see examples/dpo.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set dpo.loss=ipo (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, run output, hub id)."),
    loss: Optional[str] = typer.Option(None, help="dpo | ipo | simpo (overrides dpo.loss)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    force: bool = FORCE,
) -> None:
    """Preference optimisation on prompt/chosen/rejected pairs; the run summary JSON is the last line."""
    from tempering.recipes.dpo import run_dpo
    from tempering.train.distributed import world

    literal = {"model": model, "dpo.loss": loss, "train.steps": steps, "out": out_dir, "name": name}
    summary = train_from_config(DPOConfig, run_dpo, config, set_, literal, full, force)
    if world().main:  # under torchrun, rank 0 speaks for the run
        stdout.print(json.dumps(summary))


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
    overrides: Optional[List[str]] = typer.Option(
        None, "--set", help="Setting key=value (repeatable), e.g. engine.kind=speculative engine.draft.model=DIR."
    ),
) -> None:
    """Sample n answers per task and keep the one the reward model ranks highest; the task's own
    verifier measures the pick against a random sample and the oracle (last line: JSON)."""
    from tempering.config import BestOfNSettings, ConfigError, load_config

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
    from tempering.models.reward import NotARewardModel
    from tempering.recipes.best_of_n import run_best_of_n

    try:
        summary = run_best_of_n(settings, reward_model, precision, out)
    except (NotARewardModel, ValueError, FileNotFoundError) as exc:
        fail(str(exc))
    err.print(
        f"best-of-{n} on {summary['tasks']} tasks: RM pick {summary['rm_pick']:.1%}, random sample "
        f"{summary['random_pick']:.1%}, any correct (oracle) {summary['oracle']:.1%}"
    )
    print(json.dumps(summary))


def distill(
    config: Path = typer.Argument(..., help="YAML config (see examples/distill_draft.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set loss.temperature=2 (repeatable)."),
    teacher: Optional[str] = typer.Option(None, help="Teacher model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    force: bool = FORCE,
) -> None:
    """Distil a teacher into a smaller student (forward KL + sequence-level CE), e.g. a speculative draft."""
    from tempering.config.distill import DistillConfig
    from tempering.recipes.distill import run_distill

    literal = {"teacher": teacher, "train.steps": steps, "out": out_dir, "name": name}
    print(json.dumps(train_from_config(DistillConfig, run_distill, config, set_, literal)))


def merge(
    config: Path = typer.Argument(..., help="YAML config (inputs, weights, method; see docs/merge.md)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set method=ties (repeatable)."),
    out_dir: Optional[str] = typer.Option(None, "--out", help="Run root."),
    name: Optional[str] = typer.Option(None, help="Run name."),
    merged_model: bool = typer.Option(False, "--merged-model", help="Adapters: also write a standalone merged model."),
) -> None:
    """Merge trained tracks: LoRA adapters with PEFT (linear, cat, svd, ties, dare), full models with
    mergekit; checks the tokenizer round trip and records the merge (last line: JSON summary)."""
    from tempering.config import MergeConfig

    literal = {k: v for k, v in (("out", out_dir), ("name", name)) if v is not None}
    if merged_model:
        literal["merged_model"] = True
    try:
        cfg = load_config(MergeConfig, config, list(set_), literal)
    except (ConfigError, FileNotFoundError) as exc:
        fail(str(exc))
    from tempering.recipes.merge import run_merge

    try:
        summary = run_merge(cfg)
    except (ValueError, FileNotFoundError) as exc:  # MergeError, StageError, bad model spec
        fail(f"{config}: {exc}")
    print(json.dumps(summary))


COMMANDS = {
    "sft": sft,
    "grpo": grpo,
    "agent": agent,
    "dpo": dpo,
    "rm": rm,
    "best-of-n": best_of_n_cmd,
    "distill": distill,
    "merge": merge,
}
"""Every training command by its name on the command line."""
