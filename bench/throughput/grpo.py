"""GRPO throughput and time-to-reward: Tempering vs TRL's GRPOTrainer, side by side in one run.

Same model (the default, LoRA r=16 alpha=32 on all linear layers of every block, same
initial adapter seed), same task (built-in 2-digit addition, train split), same reward (the
composite of examples/grpo_arith.yaml, computed by Tempering's verifiers for both), 8 prompts
x 8 samples per step, at most 32 new tokens, temperature 1, beta = 0, one update per rollout
batch, learning rate 2e-4 constant, no dynamic sampling on the Tempering side (TRL has none).
Precision: "auto" for both -- bf16 only where the CPU has native bf16; on an AVX2-only CPU
bf16 matmul is emulated (~400x slower than fp32 here) and both run fp32.

Tempering samples with its default engine (continuous batching, `BatchingEngine`). TRL runs
at its fastest settings found here: `gradient_checkpointing=False` (GRPOConfig's default True
recomputes the forward); `--trl-sweep` measures s/step of TRL under each setting of
`TRL_SWEEP` and records them (bench/results/grpo_trl_sweep.json).

Each framework runs in its own child process, one after the other. Reported per side:
completions/s over the timed steps (generation + scoring + update, everything a step does,
after `--warmup` steps), the reward curve, and the first step / wall second at which the
step's mean reward reached 0.5 (null when not reached within `--steps`).

    python bench/throughput/grpo.py [--steps 6] [--warmup 1] [--threads 2]
        [--model DIR] [--sides tempering,trl] [--prompts 8 --group 8 --max-new-tokens 32] [--results FILE]

Sides: `tempering` and `trl` (LoRA, as above) and `tempering_full` (full parameters, no TRL
twin). On a GPU both frameworks train and sample on it; `--model` takes any model directory,
e.g. a random-weight shape from bench/_shared/model_shapes.py (bench/gpu/run.sh does this: its
completions then run to the token limit, so the figures are throughput, not learning).

Writes bench/results/grpo.json (or --results) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402

PROMPTS, GROUP, MAX_NEW, LR, TARGET = 8, 8, 32, 2e-4, 0.5
MODEL = "smollm2-135m-instruct"
SIDES = ("tempering", "tempering_full", "trl")
TRL_FASTEST = {"gradient_checkpointing": False}
TRL_SWEEP = [{"gradient_checkpointing": False}, {"gradient_checkpointing": True}]


def reward_parts():
    import yaml

    from tempering.config import RewardPart

    cfg = yaml.safe_load((ROOT / "examples" / "grpo_arith.yaml").read_text())
    return [RewardPart.model_validate(p) for p in cfg["reward"]]


def bench_tasks(n: int):
    from tempering.data.builtin import arithmetic_tasks
    from tempering.sources.tasks import with_reward

    return with_reward(arithmetic_tasks(n, 0, "train", "+"), reward_parts())


def curve_summary(rewards: list[float], times: list[float], warmup: int, completions: int) -> dict:
    timed = times[warmup:]
    seconds = sum(timed)
    reached = next((i for i, r in enumerate(rewards) if r >= TARGET), None)
    return {
        "rewards": rewards,
        "step_seconds": times,
        "timed_steps": len(timed),
        "seconds": seconds,
        "completions_per_s": completions * len(timed) / seconds if seconds else None,
        "steps_to_reward_0_5": None if reached is None else reached + 1,
        "seconds_to_reward_0_5": None if reached is None else sum(times[: reached + 1]),
    }


def run_tempering(steps: int, warmup: int, lora: bool = True) -> dict:
    import torch

    from tempering.config import GRPOConfig
    from tempering.models.load import load_tokenizer
    from tempering.models.lora import load_for_training
    from tempering.models.precision import resolve_precision
    from tempering.recipes.grpo import grpo_components
    from tempering.train.trainer import Trainer

    torch.manual_seed(0)
    cfg = GRPOConfig.model_validate(
        {
            "model": MODEL,
            "lora": {"r": 16, "alpha": 32} if lora else None,
            "heldout": None,
            "grpo": {
                "prompts_per_step": PROMPTS,
                "group_size": GROUP,
                "max_new_tokens": MAX_NEW,
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
                "precision": "auto",
                "optim": {"lr": LR, "schedule": "constant"},
                "checkpoint": {"every": 10_000, "keep_last": 1},
            },
        }
    )
    tok = load_tokenizer(cfg.model)
    model = load_for_training(cfg.model, cfg.lora)
    precision = resolve_precision(cfg.train.precision)
    _, source, objective = grpo_components(cfg, model, tok, bench_tasks(2000))
    train = cfg.train
    rewards, times, last = [], [], [time.perf_counter()]

    def clock(step: int, record: dict) -> None:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        rewards.append(record["reward_mean"])

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(model, objective, source, train, Path(run_dir), callbacks=[clock])
        last[0] = time.perf_counter()
        trainer.fit()  # step 1 also writes the step-0 checkpoint: one reason warm-up steps are excluded
    source.close()
    return {
        **curve_summary(rewards, times, warmup, PROMPTS * GROUP),
        "precision": precision,
        "lora": lora,
        "device": str(next(model.parameters()).device),
        "torch_threads": torch.get_num_threads(),
    }


def run_trl(steps: int, warmup: int, settings: dict | None = None) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import resolve_precision
    from tempering.verifiers import score

    torch.manual_seed(0)
    tasks = bench_tasks(2000)
    by_prompt = {t.prompt: t for t in tasks}
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": t.prompt}]} for t in tasks])

    def reward(prompts, completions, **_):
        return [score(by_prompt[p[-1]["content"]], c[-1]["content"]).value for p, c in zip(prompts, completions)]

    precision = resolve_precision("auto")
    tok = load_tokenizer(MODEL)
    tok.padding_side = "left"
    rewards, times, last = [], [], [None]

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if last[0] is None:
                last[0] = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            times.append(now - last[0])
            last[0] = now

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=PROMPTS * GROUP,
            num_generations=GROUP,
            gradient_accumulation_steps=1,
            max_completion_length=MAX_NEW,
            temperature=1.0,
            beta=0.0,
            num_iterations=1,
            learning_rate=LR,
            lr_scheduler_type="constant",
            max_steps=steps,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            bf16=precision == "bf16",
            use_cpu=not torch.cuda.is_available(),
            seed=0,
            loss_type="dapo",
            epsilon=0.2,
            epsilon_high=0.2,
            shuffle_dataset=True,
            dataloader_num_workers=0,
            **(settings or TRL_FASTEST),
        )
        trainer = GRPOTrainer(
            model=load_model(MODEL),
            reward_funcs=[reward],
            args=cfg,
            train_dataset=data,
            processing_class=tok,
            peft_config=LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM"),
            callbacks=[Clock()],
        )
        trainer.train()
    return {
        **curve_summary(rewards, times, warmup, PROMPTS * GROUP),
        "precision": precision,
        "torch_threads": torch.get_num_threads(),
        "loss_type": "dapo (token-mean, as Tempering's default)",
        "trl_settings": settings or TRL_FASTEST,
    }


def main() -> None:
    global MODEL, PROMPTS, GROUP, MAX_NEW
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--model", default=MODEL, help="alias or model directory")
    p.add_argument("--sides", default="tempering,trl", help="comma-separated, from " + ", ".join(SIDES))
    p.add_argument("--prompts", type=int, default=PROMPTS)
    p.add_argument("--group", type=int, default=GROUP)
    p.add_argument("--max-new-tokens", type=int, default=MAX_NEW)
    p.add_argument("--results", type=Path, default=RESULTS / "grpo.json")
    p.add_argument("--child", choices=SIDES)
    p.add_argument("--trl-settings", default=None, help="child only: JSON of TRL GRPOConfig settings")
    p.add_argument("--trl-sweep", action="store_true", help="time TRL under each TRL_SWEEP setting instead")
    p.add_argument("--out")
    args = p.parse_args()
    MODEL, PROMPTS, GROUP, MAX_NEW = args.model, args.prompts, args.group, args.max_new_tokens
    shape = [f"--model={MODEL}", f"--prompts={PROMPTS}", f"--group={GROUP}", f"--max-new-tokens={MAX_NEW}"]
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        if args.child == "trl":
            result = run_trl(args.steps, args.warmup, json.loads(args.trl_settings) if args.trl_settings else None)
        else:
            result = run_tempering(args.steps, args.warmup, lora=args.child == "tempering")
        Path(args.out).write_text(json.dumps(result, default=str))
        return
    if args.trl_sweep:
        sweep = []
        for settings in TRL_SWEEP:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        "trl",
                        "--out",
                        out.name,
                        f"--steps={args.steps}",
                        f"--warmup={args.warmup}",
                        f"--threads={args.threads}",
                        f"--trl-settings={json.dumps(settings)}",
                        *shape,
                    ],
                    check=True,
                )
                r = json.loads(Path(out.name).read_text())
            sweep.append(
                {
                    "settings": settings,
                    "seconds_per_step": r["seconds"] / max(r["timed_steps"], 1),
                    "completions_per_s": r["completions_per_s"],
                }
            )
            print(sweep[-1], flush=True)
        (RESULTS / "grpo_trl_sweep.json").write_text(
            json.dumps(
                {
                    "benchmark": "grpo TRL settings sweep",
                    "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "steps": args.steps,
                    "warmup_steps": args.warmup,
                    "torch_threads": args.threads,
                    "load_average_at_end": os.getloadavg(),
                    "sweep": sweep,
                },
                indent=1,
            )
        )
        return
    sides = args.sides.split(",")
    if "trl" not in sides or "tempering" not in sides or set(sides) - set(SIDES):
        p.error(f"--sides needs tempering and trl, from {', '.join(SIDES)}; got {args.sides!r}")
    runs = {}
    for name in sides:
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            cmd = [
                sys.executable,
                __file__,
                "--child",
                name,
                "--out",
                out.name,
                f"--steps={args.steps}",
                f"--warmup={args.warmup}",
                f"--threads={args.threads}",
                *shape,
            ]
            print(f"running {name} ...", flush=True)
            subprocess.run(cmd, check=True)
            runs[name] = json.loads(Path(out.name).read_text())
    ours, peer = runs["tempering"], runs["trl"]
    ratio = ours["completions_per_s"] / peer["completions_per_s"]
    t_ratio = (
        peer["seconds_to_reward_0_5"] / ours["seconds_to_reward_0_5"]
        if ours["seconds_to_reward_0_5"] and peer["seconds_to_reward_0_5"]
        else None
    )
    result = {
        "benchmark": "grpo",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "model": f"{MODEL} + LoRA r16 all-linear"
        + (" (tempering_full: full parameters)" if "tempering_full" in runs else ""),
        "device": ours["device"],
        "task": "builtin:arithmetic ops=+ (train split)",
        "reward": "examples/grpo_arith.yaml composite (correct + strict + 0.25 close + 0.5 close_bare)",
        "prompts_per_step": PROMPTS,
        "group_size": GROUP,
        "max_new_tokens": MAX_NEW,
        "beta": 0.0,
        "updates_per_batch": 1,
        "lr": LR,
        "steps": args.steps,
        "warmup_steps": args.warmup,
        "cpu": cpu_name(),
        "torch_threads": args.threads,
        "load_average_at_end": os.getloadavg(),
        "tempering_engine": "BatchingEngine (EngineSettings() default: continuous batching)",
        "trl_settings": TRL_FASTEST,
        "trl_settings_swept": [s for s in TRL_SWEEP],
        "machine_note": (
            "2 shared cores; run under /work/bench.lock while other agents' work ran at nice 19"
            if ours["device"] == "cpu"
            else "one GPU, the sides one after the other"
        ),
        "ratio_completions_per_s": ratio,
        "ratio_completions_per_s_full_vs_trl_lora": (
            runs["tempering_full"]["completions_per_s"] / peer["completions_per_s"]
            if "tempering_full" in runs
            else None
        ),
        "target_ratio": 3.0,
        "ratio_time_to_reward_0_5": t_ratio,
        "target_time_ratio": 2.0,
        "runs": runs,
    }
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps(result, indent=1, default=str))
    print(f"\nGRPO, {PROMPTS}x{GROUP} per step, <= {MAX_NEW} new tokens, precision {ours['precision']}")
    print(f"{'':12}{'compl/s':>10}{'s/step':>10}{'steps->0.5':>12}{'s->0.5':>10}  rewards")
    for name, r in runs.items():
        per = r["seconds"] / max(r["timed_steps"], 1)
        print(
            f"{name:12}{r['completions_per_s']:10.2f}{per:10.1f}{str(r['steps_to_reward_0_5']):>12}"
            f"{str(round(r['seconds_to_reward_0_5'] or 0)) if r['seconds_to_reward_0_5'] else 'n/a':>10}  "
            + " ".join(f"{x:.2f}" for x in r["rewards"])
        )
    print(
        f"ratio completions/s tempering / trl: {ratio:.2f}x (target 3x); time to reward 0.5: "
        + (f"{t_ratio:.2f}x" if t_ratio else "not reached by both within the run")
        + " (target 2x)"
    )


if __name__ == "__main__":
    main()
