"""`make demo`: SFT the default model on arithmetic and show before/after on held-out data."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tempering.config import SamplingSettings, SFTConfig, load_config
from tempering.data.io import load_rows
from tempering.types import Task


def heldout_accuracy(model_spec: str, conversations: list[Any], max_new_tokens: int = 8) -> tuple[float, list[str]]:
    """Greedy replies to the conversations' prompts, scored through the one rollout path.

    The same numeric verifier that scores RL rewards and evals scores the demo.
    """
    from tempering.models.load import load_model, load_tokenizer
    from tempering.rollout.engine import HFEngine
    from tempering.rollout.rollout import ThreadRewardWorkers, rollout

    engine = HFEngine(load_model(model_spec), load_tokenizer(model_spec))
    tasks = [Task(id=str(i), messages=[m for m in c.to_dicts() if m["role"] != "assistant"],
                  verifier={"type": "numeric", "answer": c.to_dicts()[-1]["content"]})
             for i, c in enumerate(conversations)]
    with ThreadRewardWorkers(4) as workers:
        groups = rollout(tasks, engine, SamplingSettings(temperature=0, max_new_tokens=max_new_tokens), workers)
    replies = [g[0] for g in groups]
    judged = [t for t in replies if t.scored]  # a verifier failure is no wrong answer
    accuracy = sum(t.reward.value for t in judged) / len(judged) if judged else float("nan")
    return accuracy, [t.completion.strip() for t in replies]


def run_demo(config: Path, overrides: list[str], console: Console, n_questions: int = 32) -> dict:
    from tempering.recipes.sft import run_sft

    if not any(o.startswith("name=") for o in overrides):
        overrides = overrides + [f"name=demo-{time.strftime('%Y%m%d-%H%M%S')}"]
    cfg: SFTConfig = load_config(SFTConfig, config, overrides)
    questions = [r.value for r in load_rows(cfg.data.eval).records][:n_questions]
    console.rule("[bold]Tempering demo: LoRA SFT of the default model on arithmetic")
    console.print(f"held-out questions: {len(questions)}; e.g. {questions[0].messages[0].content!r}")
    acc_before, replies_before = heldout_accuracy(cfg.model, questions)
    summary = run_sft(cfg)
    acc_after, replies_after = heldout_accuracy(summary["final"], questions)
    table = Table(title=f"before / after ({summary['steps']} steps, run {summary['run_dir']})")
    table.add_column("metric")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_row("held-out loss (assistant tokens)", f"{summary['eval_loss_before']:.4f}", f"{summary['eval_loss_after']:.4f}")
    table.add_row("held-out accuracy (numeric verifier)", f"{acc_before:.1%}", f"{acc_after:.1%}")
    table.add_row("train loss (first / last step)", f"{summary['train_loss_first']:.4f}", f"{summary['train_loss_last']:.4f}")
    console.print(table)
    q = questions[0].messages[0].content
    console.print(f"example: {q!r}\n  before: {replies_before[0]!r}\n  after:  {replies_after[0]!r}")
    console.print(f"rows {summary['data']['rows']}, quarantined {summary['data']['quarantined']}, "
                  f"guard {summary['guard'] or 'no anomalies'}; adapter: {summary['final']}")
    return {**summary, "accuracy_before": acc_before, "accuracy_after": acc_after}
