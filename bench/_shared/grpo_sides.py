"""The two sides of the GRPO benchmarks: Tempering's GRPO and TRL's `GRPOTrainer`, set up alike.

Same model (LoRA r=16 alpha=32 on all linear layers of every block), same task (built-in 2-digit
addition, train split), same reward (the composite of examples/grpo_arith.yaml, computed by
Tempering's verifiers for both), temperature 1, beta = 0, one update per rollout batch, a
constant learning rate, token-mean loss with clip 0.2 on both sides (TRL's `dapo` loss type), no
dynamic sampling on the Tempering side (TRL has none). Precision "auto" for both: bf16 only where
the CPU has native bf16. TRL runs at its fastest settings found here (`TRL_FASTEST`:
`gradient_checkpointing=False`; GRPOConfig's default True recomputes the forward).

`run_tempering(shape, steps, ...)` and `run_trl(shape, steps, ...)` return the per-step rewards
and wall seconds. `on_step(model, seconds) -> bool`, when given, runs after every step with the training seconds so
far; its own time is kept off the clock, and the run stops when it returns True.
bench/throughput/grpo.py (completions/s) and bench/experiments/time_to_reward.py (wall-clock to a
held-out accuracy) use them.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from _shared.paths import ROOT

TARGET = 0.5
TRL_FASTEST = {"gradient_checkpointing": False}
TRL_SWEEP = [{"gradient_checkpointing": False}, {"gradient_checkpointing": True}]
OnStep = Callable[[Any, float], bool]


@dataclass(frozen=True)
class Shape:
    """What both sides share: model, batch shape, learning rate and seed."""

    model: str = "smollm2-135m-instruct"
    prompts: int = 8
    group: int = 8
    max_new_tokens: int = 32
    lr: float = 2e-4
    seed: int = 0


def reward_parts():
    import yaml

    from tempering.config import RewardPart

    cfg = yaml.safe_load((ROOT / "examples" / "grpo_arith.yaml").read_text())
    return [RewardPart.model_validate(p) for p in cfg["reward"]]


def bench_tasks(n: int):
    from tempering.data.builtin import arithmetic_tasks
    from tempering.sources.tasks import with_reward

    return with_reward(arithmetic_tasks(n, 0, "train", "+"), reward_parts())


def curve_summary(
    rewards: list[float], times: list[float], warmup: int, completions: int, lengths: list[float] | None = None
) -> dict:
    """`lengths`: each step's mean completion length in tokens (generated tokens/s from them)."""
    timed = times[warmup:]
    seconds = sum(timed)
    reached = next((i for i, r in enumerate(rewards) if r >= TARGET), None)
    tokens = completions * sum(lengths[warmup : len(times)]) if lengths and len(lengths) >= len(times) else None
    return {
        "rewards": rewards,
        "step_seconds": times,
        "timed_steps": len(timed),
        "seconds": seconds,
        "completions_per_s": completions * len(timed) / seconds if seconds else None,
        "mean_completion_tokens": lengths,
        "generated_tokens_per_s": tokens / seconds if tokens is not None and seconds else None,
        "steps_to_reward_0_5": None if reached is None else reached + 1,
        "seconds_to_reward_0_5": None if reached is None else sum(times[: reached + 1]),
    }


def tempering_config(shape: Shape, steps: int, lora: bool, run_root: str) -> Any:
    """The `temper grpo` config of the Tempering side: examples/grpo_arith.yaml's tasks (2,000
    additions, train split) and reward, the shared shape, no held-out pass."""
    import torch
    import yaml

    from tempering.config import GRPOConfig

    arith = yaml.safe_load((ROOT / "examples" / "grpo_arith.yaml").read_text())
    return GRPOConfig.model_validate(
        {
            "model": shape.model,
            "lora": {"r": 16, "alpha": 32} if lora else None,
            "out": run_root,
            "name": "bench-grpo",
            "tasks": {**arith["tasks"], "n": 2000},
            "reward": arith["reward"],
            "heldout": None,
            "grpo": {
                "prompts_per_step": shape.prompts,
                "group_size": shape.group,
                "max_new_tokens": shape.max_new_tokens,
                "temperature": 1.0,
                "beta": 0.0,
                "updates_per_batch": 1,
                "dynamic_sampling": False,
                "generation_chunks": 1,
                "truncation": "keep",
                "clip_low": 0.2,
                "clip_high": 0.2,
            },
            "train": {
                "steps": steps,
                "seed": shape.seed,
                "precision": "auto",
                "threads": torch.get_num_threads(),  # the bench's --threads: "auto" reads the load average, which lags
                "optim": {"lr": shape.lr, "schedule": "constant"},
                "checkpoint": {"every": 10_000, "keep_last": 1},
            },
        }
    )


def run_tempering(shape: Shape, steps: int, warmup: int, lora: bool = True, on_step: OnStep | None = None) -> dict:
    """Tempering's side as `temper grpo` runs it (`recipes.grpo.GRPO` through `run_training`)."""
    import torch

    from _shared.product import Stop, run_recipe
    from tempering.models.precision import resolve_precision
    from tempering.recipes.grpo import GRPO

    torch.manual_seed(shape.seed)
    rewards, times, lengths, seen = [], [], [], {}

    def clock(step: int, record: dict) -> None:
        now = time.perf_counter()
        times.append(now - seen.get("last", seen["ready"]))  # from the built components (step 1: step-0 save too)
        rewards.append(record["reward_mean"])
        lengths.append(record["response_len"])
        if on_step is not None and on_step(seen["parts"].model, sum(times)):
            raise Stop("the benchmark's budget")
        seen["last"] = time.perf_counter()  # what on_step did is not the framework's time

    with tempfile.TemporaryDirectory() as run_root:
        cfg = tempering_config(shape, steps, lora, run_root)
        run_recipe(
            GRPO, cfg, [clock], seen
        )  # step 1 also writes the step-0 checkpoint: one reason warm-up steps are excluded
    model = seen["parts"].model
    return {
        **curve_summary(rewards, times, warmup, shape.prompts * shape.group, lengths),
        "precision": resolve_precision(cfg.train.precision),
        "lora": lora,
        "device": str(next(model.parameters()).device),
        "torch_threads": torch.get_num_threads(),
    }


def run_trl(shape: Shape, steps: int, warmup: int, settings: dict | None = None, on_step: OnStep | None = None) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import resolve_precision
    from tempering.verifiers import score

    torch.manual_seed(shape.seed)
    tasks = bench_tasks(2000)
    by_prompt = {t.prompt: t for t in tasks}
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": t.prompt}]} for t in tasks])

    def reward(prompts, completions, **_):
        return [score(by_prompt[p[-1]["content"]], c[-1]["content"]).value for p, c in zip(prompts, completions)]

    precision = resolve_precision("auto")
    tok = load_tokenizer(shape.model)
    tok.padding_side = "left"
    rewards, times, lengths, last = [], [], [], [None]

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if last[0] is None:
                last[0] = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))
            if logs and "completions/mean_length" in logs:
                lengths.append(float(logs["completions/mean_length"]))

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            times.append(now - last[0])
            if on_step is not None and on_step(kw["model"], sum(times)):
                control.should_training_stop = True
            last[0] = time.perf_counter()

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=shape.prompts * shape.group,
            num_generations=shape.group,
            gradient_accumulation_steps=1,
            max_completion_length=shape.max_new_tokens,
            temperature=1.0,
            beta=0.0,
            num_iterations=1,
            learning_rate=shape.lr,
            lr_scheduler_type="constant",
            max_steps=steps,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            bf16=precision == "bf16",
            use_cpu=not torch.cuda.is_available(),
            seed=shape.seed,
            loss_type="dapo",
            epsilon=0.2,
            epsilon_high=0.2,
            shuffle_dataset=True,
            dataloader_num_workers=0,
            **(settings or TRL_FASTEST),
        )
        trainer = GRPOTrainer(
            model=load_model(shape.model),
            reward_funcs=[reward],
            args=cfg,
            train_dataset=data,
            processing_class=tok,
            peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"),
            callbacks=[Clock()],
        )
        trainer.train()
    return {
        **curve_summary(rewards, times, warmup, shape.prompts * shape.group, lengths),
        "precision": precision,
        "torch_threads": torch.get_num_threads(),
        "loss_type": "dapo (token-mean, as Tempering's default)",
        "trl_settings": settings or TRL_FASTEST,
    }
