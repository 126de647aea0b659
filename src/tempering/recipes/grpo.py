"""The GRPO recipe: tasks -> rollouts -> verifiers -> the one Trainer -> recorded run.

Held-out tasks are judged greedily at the start, every `heldout.every` steps and at the
end, with the same verifier as the reward; each reward part is reported as its own rate
(e.g. `correct` = final-answer accuracy, `strict` = the reply is just the answer). When the
training reward rises over the last `alarm_window` evaluations while the held-out reward
does not, the run logs an `alarm` event (reward hacking or overfitting).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tempering.config import GRPOConfig
from tempering.pipeline.stage import StageSpec, input_list, run_stage
from tempering.rollout.engine import Engine, HFEngine, SamplingParams
from tempering.train.metrics import console
from tempering.types import Task


def heldout_eval(engine: Engine, tasks: list[Task], max_new_tokens: int, weights: dict[str, float]) -> dict[str, float]:
    """Greedy replies to `tasks`, scored by their verifiers: mean reward, per-part rates, truncation."""
    from tempering.rollout.source import safe_score
    from tempering.verifiers import VerifierContext

    prompts = [engine.chat_prompt(t.chat()) for t in tasks]
    groups = engine.generate(prompts, SamplingParams(n=1, temperature=0, max_new_tokens=max_new_tokens))
    with VerifierContext() as ctx:  # one sandbox for the whole held-out set, not one per sample
        rewards = [safe_score(t, g[0].text, ctx) for t, g in zip(tasks, groups)]
    out = {"reward": sum(r.value for r in rewards) / len(rewards),
           "truncation_rate": sum(g[0].truncated for g in groups) / len(groups)}
    for name, weight in weights.items():
        out[name] = sum(r.components.get(name, 0.0) for r in rewards) / len(rewards) / (weight or 1.0)
    return out


class HeldoutMonitor:
    """Trainer callback: held-out evaluation, the divergence alarm, and the curves."""

    def __init__(self, cfg: GRPOConfig, engine: Engine, tasks: list[Task], metrics_path: Path):
        self.cfg, self.engine, self.tasks = cfg, engine, tasks
        self.weights = {p.name: p.weight for p in cfg.reward or []}
        self.history: list[dict[str, float]] = []
        self.rewards: list[tuple[int, float]] = []
        self.alarms: list[dict[str, Any]] = []
        self.metrics_path = metrics_path

    def evaluate(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        result = heldout_eval(self.engine, self.tasks, self.cfg.heldout.max_new_tokens, self.weights)
        result.update(step=step, eval_s=time.perf_counter() - t0)
        self.history.append(result)
        with self.metrics_path.open("a") as fh:
            fh.write(json.dumps({"event": "heldout", **result}) + "\n")
        shown = ", ".join(f"{k} {v:.3f}" for k, v in result.items() if k not in ("step", "eval_s"))
        console.print(f"[cyan]held-out @ step {step}: {shown}[/cyan]")
        self._check_divergence(step)
        return result

    def __call__(self, step: int, record: dict) -> None:
        self.rewards.append((step, record.get("reward_mean", 0.0)))
        if step % self.cfg.heldout.every == 0:
            self.evaluate(step)

    def _check_divergence(self, step: int) -> None:
        window = self.cfg.heldout.alarm_window
        if len(self.history) < window:
            return
        first, last = self.history[-window], self.history[-1]
        train_then = [r for s, r in self.rewards if s <= first["step"]][-5:]
        train_now = [r for s, r in self.rewards if s <= last["step"]][-5:]
        if not train_then or not train_now:
            return
        rise = sum(train_now) / len(train_now) - sum(train_then) / len(train_then)
        held = last["reward"] - first["reward"]
        if rise > 0.05 and held <= 0:
            alarm = {"step": step, "train_reward_rise": rise, "heldout_change": held}
            self.alarms.append(alarm)
            with self.metrics_path.open("a") as fh:
                fh.write(json.dumps({"event": "alarm", "kind": "reward_heldout_divergence", **alarm}) + "\n")
            console.print(f"[bold red]alarm: training reward +{rise:.3f} while held-out changed {held:+.3f} "
                          f"(steps {first['step']}..{last['step']}): reward hacking or overfitting?[/bold red]")

    def plot(self, out: Path, train_history: list[dict]) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        steps = [r["step"] for r in train_history]
        ax[0].plot(steps, [r.get("reward_mean", 0.0) for r in train_history], label="reward mean")
        ax[0].plot(steps, [r.get("accuracy", 0.0) for r in train_history], label="sample accuracy", alpha=0.7)
        ax[0].set(title="training rollouts", xlabel="step")
        ax[0].legend()
        hs = [h["step"] for h in self.history]
        for key in ["reward", *self.weights]:
            ax[1].plot(hs, [h.get(key, 0.0) for h in self.history], marker="o", label=f"held-out {key}")
        ax[1].set(title="held-out (greedy)", xlabel="step", ylim=(0, max(1.05, max((h["reward"] for h in self.history), default=1) + 0.05)))
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        return out


def grpo_stage(cfg: GRPOConfig, force: bool = False) -> StageSpec:
    """The stage a GRPO config describes: its task files with their roles."""
    pairs = [(cfg.tasks.source, "tasks")] + ([(cfg.heldout.tasks.source, "heldout")] if cfg.heldout else [])
    return StageSpec("grpo", cfg.out, cfg.name, cfg.model_dump(), input_list(pairs), cfg.model, cfg.train.steps,
                     cfg.train.seed, cfg.train.threads, force)


def grpo_components(cfg: GRPOConfig, model: Any, tokenizer: Any, tasks: list[Task], store: Any = None) -> tuple[Any, Any, Any]:
    """(engine, batch source, objective) of a GRPO stage; the recipe and bench/grpo.py share it."""
    from tempering.objectives.grpo import GRPOObjective
    from tempering.rollout.source import RolloutSource
    from tempering.models.precision import resolve_precision

    precision = resolve_precision(cfg.train.precision)
    engine = HFEngine(model, tokenizer, precision=precision)
    source = RolloutSource(tasks, engine, cfg.grpo, cfg.train.grad_accum, cfg.train.seed, store, model, precision)
    return engine, source, GRPOObjective(cfg.grpo)


def run_grpo(cfg: GRPOConfig, force: bool = False) -> dict[str, Any]:
    """Run one GRPO stage end to end and record it; returns the run summary.

    `force`: resume even though the config differs from the one the run started with.
    """
    from tempering.models.load import load_tokenizer
    from tempering.models.lora import load_for_training
    from tempering.rollout.store import TrajectoryStore
    from tempering.sources.tasks import load_tasks, with_reward
    from tempering.train.trainer import Trainer

    if cfg.train.grad_accum > cfg.grpo.prompts_per_step:
        raise ValueError("train.grad_accum must not exceed grpo.prompts_per_step (micro-batches hold whole groups)")
    from tempering.evals.leakage import check_private_overlap_tasks

    check_private_overlap_tasks(load_tasks(cfg.tasks), source=cfg.tasks.source)  # before anything is recorded
    source = None
    with run_stage(grpo_stage(cfg, force)) as stage:
        if stage.finished:
            return stage.result.summary
        run_dir, name = stage.run_dir, stage.name
        try:
            tokenizer = load_tokenizer(cfg.model)
            tasks = with_reward(load_tasks(cfg.tasks), cfg.reward)
            model = load_for_training(cfg.model, cfg.lora)
            store = TrajectoryStore(run_dir, name)
            engine, source, objective = grpo_components(cfg, model, tokenizer, tasks, store)
            callbacks, monitor = [], None
            if cfg.heldout:
                held = with_reward(load_tasks(cfg.heldout.tasks), cfg.reward)
                overlap = {t.prompt for t in held} & {t.prompt for t in tasks}
                if overlap:
                    raise ValueError(f"{len(overlap)} held-out prompts also appear in the training tasks")
                monitor = HeldoutMonitor(cfg, engine, held, run_dir / "metrics.jsonl")
                callbacks.append(monitor)
            trainer = Trainer(model, objective, source, cfg.train, run_dir, callbacks)
            before = monitor.evaluate(trainer.step) if monitor and not (run_dir / "checkpoints").exists() else None
            result = trainer.fit()
            after = None
            if monitor and (not monitor.history or monitor.history[-1]["step"] != result.steps):
                after = monitor.evaluate(result.steps)
            elif monitor:
                after = monitor.history[-1]
            stage.save_model(model, tokenizer)
            plot = monitor.plot(run_dir / "curves.png", result.history) if monitor else None
            stage.finish({
                "steps": result.steps,
                "seconds": result.seconds, "resumed_from": result.resumed_from, "guard": result.counts,
                "tasks": len(tasks), "heldout_before": before, "heldout_after": after,
                "heldout_history": monitor.history if monitor else [], "alarms": monitor.alarms if monitor else [],
                "reward_first": result.history[0].get("reward_mean") if result.history else None,
                "reward_last": result.history[-1].get("reward_mean") if result.history else None,
                "curves": str(plot) if plot else None,
            }, {"trajectories": str(store.dir)})
        finally:
            if source is not None:
                source.close()
    return stage.result.summary
