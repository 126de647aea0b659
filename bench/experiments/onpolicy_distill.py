"""On-policy distillation vs the existing forward-KL distillation of the 4-layer speculative draft.

The student is the draft of docs/speculative.md: layers [0, 1, 28, 29] of the default model
(`temper distill`, forward KL on the teacher's greedy replies). Both arms start from one shared
warm start (`--warm-steps` of that forward-KL recipe: a layer-dropped student is too far from the
teacher for its own samples to mean anything), then each seed runs `--steps` more optimizer steps
of each arm with the same replies per step:

  forward_kl  `temper distill` on the teacher's greedy replies to the training prompts
              (kl_weight 0.8, the shipped example's mix), batch = replies per step
  on_policy   `temper distill --on-policy`: the student samples `prompts x samples` replies to
              the same training prompts, the teacher scores them, reverse KL as the advantage;
              with --divergence a registered divergence over whole distributions instead
              (`rollout.divergence`), --student-fraction GKD's lambda (the other steps learn on
              the teacher's greedy replies), --sample-temperature cooler student prefixes

Measured on held-out prompts (the arithmetic generator's held-out split), per student:
  reverse_kl_per_token  KL(student || teacher) on the student's own samples (T = 1), both log-probs
                        by the trainer's forward (`rollout.distill_source.reverse_kl_to_teacher`)
  reverse_kl_exact_per_token  the same over the whole vocabulary at the same sampled positions
                        (the expectation the one-sample figure estimates, without its noise)
  acceptance_rate       the student as a speculative draft of the teacher (k = 4, greedy)
  forward_kl_per_token  KL(teacher || student) on the teacher's greedy replies (the forward arm's own target)

    python bench/experiments/onpolicy_distill.py [--seeds 0 1 2] [--warm-steps 60] [--steps 12] \
        [--forward-lr 1e-3] [--divergence reverse_kl --student-fraction 0.5 --on-policy-lr 1e-4]

Writes bench/results/onpolicy_distill.json (means with 95% t-intervals over seeds, paired
differences, wall time, load average).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

TEACHER = "smollm2-135m-instruct"
LAYERS = [0, 1, 28, 29]
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776}


def say(msg: str, t0: float) -> None:
    print(f"[{time.perf_counter() - t0:6.0f}s load {os.getloadavg()[0]:.1f}] {msg}", flush=True)


def teacher_replies(engine, tasks, max_new_tokens: int) -> list[dict]:
    """The teacher's greedy replies as `messages` rows (the forward-KL data, right or wrong)."""
    from tempering.config import SamplingParams

    prompts = [engine.chat_prompt(t.chat()) for t in tasks]
    groups = engine.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
    return [{"messages": [*t.chat(), {"role": "assistant", "content": g[0].text}]} for t, g in zip(tasks, groups)]


def distill(config: dict, on_policy: bool) -> dict:
    from tempering.config import load_config
    from tempering.config.distill import DistillConfig
    from tempering.recipes.distill import run_distill

    cfg = load_config(DistillConfig, None, [], {**config, "on_policy": on_policy})
    return run_distill(cfg)


def measure(student_dir: str, teacher, tokenizer, held, forward_rows, args) -> dict:
    from tempering.config import EngineSettings, SamplingParams
    from tempering.models.load import load_model
    from tempering.rollout.distill_source import reverse_kl_to_teacher
    from tempering.rollout.select import build_engine

    student = load_model(student_dir).eval()
    engine = build_engine(EngineSettings(kind="batching"), student, tokenizer, args.precision)
    prompts = [engine.chat_prompt(t.chat()) for t in held]
    params = SamplingParams(n=args.eval_samples, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    rkl = reverse_kl_to_teacher(engine, student, teacher, prompts, params, args.precision)
    spec = build_engine(
        EngineSettings(kind="speculative", draft={"model": student_dir, "k": 4}), teacher, tokenizer, args.precision
    )
    spec.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens))
    stats = spec.stats.summary()
    return {
        **rkl,
        "forward_kl_per_token": forward_kl(student, teacher, tokenizer, forward_rows, args.precision),
        "acceptance_rate": stats["acceptance_rate"],
        "mean_acceptance_length": stats["mean_acceptance_length"],
    }


def forward_kl(student, teacher, tokenizer, rows: list[dict], precision: str) -> float:
    """KL(teacher || student) per assistant token of the teacher's held-out greedy replies."""
    import torch

    from tempering.data.render import detect_tool_call_style, render_with_mask
    from tempering.models.precision import autocast
    from tempering.objectives.distill import forward_kl_sum
    from tempering.types import IGNORE

    total, n = 0.0, 0
    style = detect_tool_call_style(tokenizer)
    for row in rows:
        ex = render_with_mask(tokenizer, row["messages"], style)
        ids = torch.tensor([ex.input_ids])
        labels = torch.tensor([ex.labels])[:, 1:]
        keep = labels != IGNORE
        with torch.no_grad(), autocast(precision, torch.device("cpu")):
            logits = [m(input_ids=ids).logits[:, :-1][keep] for m in (student, teacher)]
        total += float(forward_kl_sum(logits[0], logits[1], 1.0))
        n += int(keep.sum())
    return total / max(n, 1)


def interval(xs: list[float]) -> dict:
    mean = statistics.fmean(xs)
    half = T_975.get(len(xs) - 1, 2.0) * statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0.0
    return {"mean": mean, "ci95": [mean - half, mean + half], "values": xs}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--warm-steps", type=int, default=60)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--prompts", type=int, default=2, help="on-policy prompts per step")
    p.add_argument("--samples", type=int, default=4, help="on-policy replies per prompt")
    p.add_argument("--train-prompts", type=int, default=48)
    p.add_argument("--heldout", type=int, default=16)
    p.add_argument("--eval-samples", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--precision", default="auto")
    p.add_argument("--forward-lr", type=float, default=1e-3, help="peak lr of the forward-KL arm")
    p.add_argument("--on-policy-lr", type=float, default=1e-3, help="peak lr of the on-policy arm")
    p.add_argument("--divergence", default=None, help="rollout.divergence of the on-policy arm (None: policy gradient)")
    p.add_argument("--beta", type=float, default=None, help="rollout.beta (jsd only)")
    p.add_argument("--student-fraction", type=float, default=1.0, help="rollout.student_fraction (GKD's lambda)")
    p.add_argument("--sample-temperature", type=float, default=1.0, help="rollout.temperature of the on-policy arm")
    p.add_argument("--arms", nargs="+", default=["forward_kl", "on_policy"], choices=["forward_kl", "on_policy"])
    p.add_argument("--result", default="onpolicy_distill.json", help="file name under bench/results")
    p.add_argument("--out", default="runs/onpolicy-distill")
    args = p.parse_args()

    import torch

    from tempering.atomic import write_jsonl_atomic
    from tempering.config import EngineSettings, TaskSourceSettings
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.precision import resolve_precision
    from tempering.rollout.select import build_engine
    from tempering.sources.tasks import load_tasks

    # one thread, as the recipe sets on this shared 2-core host: the default oversubscribes it
    torch.set_num_threads(1)
    t0, load_before = time.perf_counter(), list(os.getloadavg())
    args.precision = resolve_precision(args.precision)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    teacher, tokenizer = load_model(TEACHER).eval(), load_tokenizer(TEACHER)
    train = load_tasks(TaskSourceSettings(n=args.train_prompts, ops="+", split="train"))
    held = load_tasks(TaskSourceSettings(n=args.heldout, ops="+", split="heldout"))
    engine = build_engine(EngineSettings(kind="batching"), teacher, tokenizer, args.precision)
    for name, tasks in (("teacher_train.jsonl", train), ("teacher_held.jsonl", held)):
        if not (out / name).exists():  # a second invocation on the same --out reuses them (and the warm start)
            write_jsonl_atomic(out / name, teacher_replies(engine, tasks, args.max_new_tokens), sidecar=False)
    held_rows = [json.loads(line) for line in (out / "teacher_held.jsonl").read_text().splitlines()]
    say(f"teacher replies: {len(train)} training, {len(held)} held-out prompts", t0)

    replies = args.prompts * args.samples
    base = {"teacher": TEACHER, "out": str(out), "train": {"precision": args.precision}}
    forward = {
        "data": {"train": [str(out / "teacher_train.jsonl")], "max_length": 256},
        "loss": {"temperature": 1.0, "kl_weight": 0.8},
    }
    optim = {"lr": 1e-3, "warmup_steps": 5, "min_lr_ratio": 0.1}
    warm_cfg = {
        **base,
        **forward,
        "name": "warm",
        "student": {"layers": LAYERS},
        "train": {**base["train"], "steps": args.warm_steps, "batch_size": replies, "seed": 0, "optim": optim},
    }
    distill(warm_cfg, on_policy=False)  # the same config again: the finished run is reused
    warm_dir = str(out / "warm" / "final")
    say(f"warm start: {args.warm_steps} forward-KL steps", t0)
    warm_file = out / "warm_measured.json"  # a second invocation on the same --out reuses the figures
    if not warm_file.exists():
        warm_file.write_text(json.dumps(measure(warm_dir, teacher, tokenizer, held, held_rows, args)))
    results = {"warm_start": json.loads(warm_file.read_text()), "arms": {}}
    say(f"warm start measured: {results['warm_start']}", t0)
    arms: dict[str, list[dict]] = {arm: [] for arm in args.arms}
    for seed in args.seeds:
        train_cfg = {**base["train"], "steps": args.steps, "seed": seed, "optim": {**optim, "warmup_steps": 0}}
        for arm in arms:
            cfg = {**base, "name": f"{arm}-seed{seed}", "student": {"model": warm_dir}, "train": train_cfg}
            if arm == "forward_kl":
                optim_f = {**train_cfg["optim"], "lr": args.forward_lr}
                cfg = {**cfg, **forward, "train": {**train_cfg, "batch_size": replies, "optim": optim_f}}
                if args.forward_lr != 1e-3:
                    cfg["name"] = f"{arm}-lr{args.forward_lr:g}-seed{seed}"
            else:
                cfg["name"] = f"{arm}-{args.divergence or 'pg'}{args.beta or ''}-lr{args.on_policy_lr:g}-seed{seed}"
                cfg["train"] = {**train_cfg, "optim": {**train_cfg["optim"], "lr": args.on_policy_lr}}
                rollout = {"prompts_per_step": args.prompts, "samples_per_prompt": args.samples}
                prompts = {"n": args.train_prompts, "ops": "+", "split": "train"}
                cfg["rollout"] = {**rollout, "tasks": prompts, "max_new_tokens": args.max_new_tokens}
                if args.divergence is not None:
                    cfg["rollout"]["divergence"] = args.divergence
                if args.beta is not None:
                    cfg["rollout"]["beta"] = args.beta
                if args.student_fraction != 1.0:
                    cfg["rollout"]["student_fraction"] = args.student_fraction
                    cfg["name"] = cfg["name"].replace("-lr", f"-f{args.student_fraction:g}-lr")
                if args.sample_temperature != 1.0:  # sample cooler, compare the distributions at T = 1
                    cfg["rollout"] |= {"temperature": args.sample_temperature, "divergence_temperature": 1.0}
                    cfg["name"] = cfg["name"].replace("-lr", f"-t{args.sample_temperature:g}-lr")
            t1 = time.perf_counter()
            summary = distill(cfg, on_policy=arm == "on_policy")
            row = {"seed": seed, "train_s": time.perf_counter() - t1, "steps": summary["steps"]}
            row.update(measure(str(out / cfg["name"] / "final"), teacher, tokenizer, held, held_rows, args))
            arms[arm].append(row)
            say(f"{arm} seed {seed}: {row}", t0)
    for arm, rows in arms.items():
        keys = ("reverse_kl_per_token", "reverse_kl_exact_per_token", "reverse_kl_per_reply")
        keys += ("forward_kl_per_token", "acceptance_rate", "train_s")
        results["arms"][arm] = {"runs": rows, **{k: interval([r[k] for r in rows]) for k in keys}}
    forward_runs = arms.get("forward_kl")
    if forward_runs is None and (RESULTS / "onpolicy_distill.json").exists():  # pair with the main run's arm
        forward_runs = json.loads((RESULTS / "onpolicy_distill.json").read_text())["arms"]["forward_kl"]["runs"]
        results["forward_kl_from"] = "onpolicy_distill.json"
    paired = {}
    if forward_runs and "on_policy" in arms:
        for key in ("reverse_kl_per_token", "reverse_kl_exact_per_token", "acceptance_rate", "forward_kl_per_token"):
            diffs = [b[key] - a[key] for a, b in zip(forward_runs, arms["on_policy"])]
            paired[key] = interval(diffs)
    results.update(
        paired_on_policy_minus_forward=paired,
        setup={**vars(args), "student_layers": LAYERS, "replies_per_step": replies, "teacher": TEACHER},
        wall_s=time.perf_counter() - t0,
        load_avg_before=load_before,
        load_avg_after=list(os.getloadavg()),
        cpu=cpu_name(),
        note="other helpers' tests and benches ran beside this on the shared 2-core host; times are load-bound",
    )
    (RESULTS / args.result).write_text(json.dumps(results, indent=1))
    say(f"wrote bench/results/{args.result}", t0)


if __name__ == "__main__":
    main()
