"""On-policy distillation vs the existing forward-KL distillation of the 4-layer speculative draft.

The student is the draft of docs/speculative.md: layers [0, 1, 28, 29] of the default model
(`temper distill`, forward KL on the teacher's greedy replies). Every arm starts from one shared
warm start (`--warm-steps` of that forward-KL recipe: a layer-dropped student is too far from the
teacher for its own samples to mean anything), then each seed runs `--steps` more optimizer steps
of each arm with the same replies per step (the budget; the teacher-scored tokens and the wall
time of each arm are recorded beside it):

  forward_kl_lr<lr>  `temper distill` on the teacher's greedy replies to the training prompts
                     (kl_weight 0.8, the shipped example's mix), batch = replies per step, one arm
                     per `--forward-lrs` entry (1e-3 is the shipped recipe's)
  on_policy          `temper distill --on-policy`: the student samples `prompts x samples` replies
                     to the same training prompts (T = 1), the teacher scores them; --divergence a
                     registered divergence over whole distributions (`rollout.divergence`; None:
                     the policy gradient with the one-sample reverse KL as the advantage),
                     --student-fraction GKD's lambda (the other steps learn on the teacher's greedy
                     replies, under --teacher-divergence if given), --sample-temperature cooler
                     student prefixes, --train-max-new-tokens longer training samples

Measured per prompt on `--split` (heldout: the arithmetic generator's held-out split, the first
`--heldout` prompts; val: the next `--val` held-out prompts not among them, for choosing the
on-policy arm's settings on seed 0 without touching the held-out figures):
  reverse_kl_exact_per_token  KL(student || teacher) over the whole vocabulary at the positions of
                        the student's own samples (T = 1, `--eval-samples` per prompt), both by the
                        trainer's forward (`rollout.distill_source.reverse_kl_to_teacher`)
  reverse_kl_per_token  its one-sample estimate log p_s(y) - log p_t(y) on the same samples
  acceptance_rate       the student as a speculative draft of the teacher (k = 4, greedy), one
                        prompt per row of one batch (accepted / proposed draft tokens, per row)
  forward_kl_per_token  KL(teacher || student) on the teacher's greedy replies (the forward arm's target)

    python bench/experiments/onpolicy_distill.py [--seeds 0 1 2] [--warm-steps 60] [--steps 60] \
        [--forward-lrs 1e-3] [--divergence reverse_kl --student-fraction 0.5 --on-policy-lr 1e-3]
    python bench/experiments/onpolicy_distill.py --divergence jsd --beta 0.5 \
        --teacher-divergence forward_kl                 # the headline arm
    python bench/experiments/onpolicy_distill.py --split val --seeds 0 --forward-lrs 1e-3 1e-4 \
        --student-fraction 1 --on-policy-lr 1e-4        # a tuning run: filed under `tuning`

Writes bench/results/<--result> (`--split val`: under its `tuning` key; the file's written-by-hand
keys, `claim`, `verdict`, `tries`, `tuning`, `first_choice`, ..., are kept): per arm the pooled
figures per seed (means with 95% t-intervals over seeds), and on-policy minus each forward arm
paired per prompt: a paired bootstrap over the prompts of the seed-averaged per-prompt figures
(`tempering.evals.stats.paired_bootstrap`), the same per seed, and the t-interval over the seeds'
pooled differences; the budget, wall time, load average.
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
METRICS = ("reverse_kl_exact_per_token", "reverse_kl_per_token", "acceptance_rate", "forward_kl_per_token")


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


def measure(student_dir: str, teacher, tokenizer, tasks, teacher_rows, args) -> dict:
    """Per prompt of `tasks`: the figures of METRICS (and their pooled values), one student."""
    from tempering.config import EngineSettings, SamplingParams
    from tempering.models.load import load_model
    from tempering.rollout.distill_source import reverse_kl_to_teacher
    from tempering.rollout.select import build_engine

    student = load_model(student_dir).eval()
    engine = build_engine(EngineSettings(kind="batching"), student, tokenizer, args.precision)
    prompts = [engine.chat_prompt(t.chat()) for t in tasks]
    n = args.eval_samples
    params = SamplingParams(n=n, temperature=1.0, max_new_tokens=args.max_new_tokens, seed=0)
    rkl = reverse_kl_to_teacher(engine, student, teacher, prompts, params, args.precision)
    replies = rkl.pop("replies")
    per_prompt: dict[str, list[float]] = {k: [] for k in METRICS}
    for i in range(len(prompts)):
        tokens = max(sum(replies["tokens"][i * n : (i + 1) * n]), 1)
        per_prompt["reverse_kl_exact_per_token"].append(sum(replies["exact"][i * n : (i + 1) * n]) / tokens)
        per_prompt["reverse_kl_per_token"].append(sum(replies["one_sample"][i * n : (i + 1) * n]) / tokens)
    spec = build_engine(
        EngineSettings(kind="speculative", draft={"model": student_dir, "k": 4}), teacher, tokenizer, args.precision
    )
    spec.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens))
    accepted = [spec.stats.accepted_by_row.get(i, 0) for i in range(len(prompts))]  # one row per prompt
    proposed = [spec.stats.proposed_by_row.get(i, 0) for i in range(len(prompts))]
    per_prompt["acceptance_rate"] = [a / p if p else 0.0 for a, p in zip(accepted, proposed)]
    fkl = [forward_kl(student, teacher, tokenizer, [row], args.precision) for row in teacher_rows]
    per_prompt["forward_kl_per_token"] = [s / max(c, 1) for s, c in fkl]
    return {
        **rkl,
        "acceptance_rate": sum(accepted) / max(sum(proposed), 1),
        "forward_kl_per_token": sum(s for s, _ in fkl) / max(sum(c for _, c in fkl), 1),
        "per_prompt": per_prompt,
    }


def forward_kl(student, teacher, tokenizer, rows: list[dict], precision: str) -> tuple[float, int]:
    """KL(teacher || student) summed over the assistant tokens of the teacher's greedy replies, and their count."""
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
    return total, n


def interval(xs: list[float]) -> dict:
    """Mean over seeds with the t-interval of `tempering.evals.stats` (none for one seed)."""
    from tempering.evals.stats import t_interval

    e = t_interval(xs) if len(xs) > 1 else None
    return {"mean": statistics.fmean(xs), "ci95": [e.low, e.high] if e else None, "values": xs}


def teacher_compute(run_dir: Path, targets: list[int]) -> dict:
    """What the teacher did in a run: `scored_positions`, the positions whose next-token
    distribution it gave (the forward arm's target tokens of the consumed training rows, whose
    per-row counts are `targets`; the on-policy arm's reply tokens: the student's samples, or
    the teacher's greedy replies it also generated), and `forward_tokens`, every token its
    forward ran over (prompts included)."""
    scored = forward = 0
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        forward += int(r.get("real_tokens", 0))
        if "completions" in r:
            scored += round(r["completions"] * r["response_len"])
    consumed = run_dir / "consumed.jsonl"
    if not scored and consumed.exists():
        scored = sum(targets[i] for line in consumed.read_text().splitlines() for i in json.loads(line)["ids"])
    return {"scored_positions": scored, "forward_tokens": forward}


def target_counts(tokenizer, path: Path) -> list[int]:
    """Assistant target tokens per row of a conversations file, as SFT's rendering counts them."""
    from tempering.data.render import detect_tool_call_style, render_with_mask
    from tempering.types import IGNORE

    style = detect_tool_call_style(tokenizer)
    rows = [json.loads(line)["messages"] for line in path.read_text().splitlines()]
    return [sum(x != IGNORE for x in render_with_mask(tokenizer, m, style).labels[1:]) for m in rows]


def paired(forward_runs: list[dict], on_policy_runs: list[dict]) -> dict:
    """On-policy minus forward KL per metric: per prompt (bootstrap), per seed, and over seed means."""
    from tempering.evals.stats import paired_bootstrap

    out = {}
    for key in METRICS:
        a = [r["per_prompt"][key] for r in forward_runs]  # (seeds, prompts)
        b = [r["per_prompt"][key] for r in on_policy_runs]
        by_prompt = lambda runs: [list(col) for col in zip(*runs)]  # noqa: E731  (prompts, seeds)
        out[key] = {
            "bootstrap_over_prompts": paired_bootstrap(by_prompt(a), by_prompt(b)).to_dict(),
            "per_seed": [paired_bootstrap(x, y, seed=i).to_dict() for i, (x, y) in enumerate(zip(a, b))],
            "over_seed_means": interval([y[key] - x[key] for x, y in zip(forward_runs, on_policy_runs)]),
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--warm-steps", type=int, default=60)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=5, help="lr warm-up steps of every arm (a fresh optimizer)")
    p.add_argument("--prompts", type=int, default=2, help="on-policy prompts per step")
    p.add_argument("--samples", type=int, default=4, help="on-policy replies per prompt")
    p.add_argument("--train-prompts", type=int, default=512)
    p.add_argument("--heldout", type=int, default=64)
    p.add_argument("--val", type=int, default=48, help="validation prompts (held-out split, after --heldout)")
    p.add_argument("--split", default="heldout", choices=["heldout", "val"])
    p.add_argument("--eval-samples", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--precision", default="auto")
    p.add_argument("--forward-lrs", type=float, nargs="+", default=[1e-3], help="peak lrs of forward-KL arms")
    p.add_argument("--on-policy-lr", type=float, default=1e-3, help="peak lr of the on-policy arm")
    p.add_argument("--divergence", default="reverse_kl", help="rollout.divergence of the on-policy arm ('pg': none)")
    p.add_argument("--beta", type=float, default=None, help="rollout.beta (jsd only)")
    p.add_argument("--student-fraction", type=float, default=0.5, help="rollout.student_fraction (GKD's lambda)")
    p.add_argument("--teacher-kl-weight", type=float, default=1.0, help="rollout.teacher_kl_weight (1 - it: CE)")
    p.add_argument("--teacher-divergence", default=None, help="rollout.teacher_divergence (the teacher-reply steps')")
    p.add_argument(
        "--train-max-new-tokens", type=int, default=None, help="the on-policy samples' (default: the eval's)"
    )
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
    held_all = load_tasks(TaskSourceSettings(n=args.heldout + args.val, ops="+", split="heldout"))
    test = held_all[: args.heldout]
    seen = {t.prompt for t in test}
    val = [t for t in held_all[args.heldout :] if t.prompt not in seen]  # the generator repeats a few
    tasks = test if args.split == "heldout" else val
    engine = build_engine(EngineSettings(kind="batching"), teacher, tokenizer, args.precision)
    train_file = out / f"teacher_train{len(train)}.jsonl"
    eval_file = out / f"teacher_{args.split}{len(tasks)}.jsonl"
    for path, rows in ((train_file, train), (eval_file, tasks)):
        if not path.exists():  # a second invocation on the same --out reuses them (and every run)
            write_jsonl_atomic(path, teacher_replies(engine, rows, args.max_new_tokens), sidecar=False)
    eval_rows = [json.loads(line) for line in eval_file.read_text().splitlines()]
    targets = target_counts(tokenizer, train_file)
    say(f"teacher replies: {len(train)} training, {len(tasks)} {args.split} prompts", t0)

    replies = args.prompts * args.samples
    base = {"teacher": TEACHER, "out": str(out), "train": {"precision": args.precision}}
    forward = {
        "data": {"train": [str(train_file)], "max_length": 256},
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
    warm_dir = out / "warm" / "final"
    say(f"warm start: {args.warm_steps} forward-KL steps", t0)
    tag = f"measured_{args.split}{len(tasks)}_n{args.eval_samples}_t{args.max_new_tokens}.json"

    def measured(run_dir: Path) -> dict:  # cached beside the run: a second invocation reuses it
        if not (run_dir / tag).exists():
            figures = measure(str(run_dir / "final"), teacher, tokenizer, tasks, eval_rows, args)
            (run_dir / tag).write_text(json.dumps(figures))
        return json.loads((run_dir / tag).read_text())

    results: dict = {"warm_start": measured(out / "warm"), "arms": {}}
    say(f"warm start measured: { {k: results['warm_start'][k] for k in METRICS} }", t0)
    divergence = None if args.divergence == "pg" else args.divergence
    on_name = f"on_policy_{args.divergence}{args.beta or ''}"
    if args.student_fraction != 1.0:
        on_name += f"_f{args.student_fraction:g}"
    if args.teacher_divergence is not None:
        on_name += f"_td{args.teacher_divergence}"
    if args.teacher_kl_weight != 1.0:
        on_name += f"_tw{args.teacher_kl_weight:g}"
    if (args.prompts, args.samples) != (2, 4):
        on_name += f"_p{args.prompts}x{args.samples}"
    if args.train_max_new_tokens is not None:
        on_name += f"_m{args.train_max_new_tokens}"
    if args.sample_temperature != 1.0:
        on_name += f"_t{args.sample_temperature:g}"
    on_name += f"_lr{args.on_policy_lr:g}"
    arms: dict[str, list[dict]] = {}
    for seed in args.seeds:
        train_cfg = {
            **base["train"],
            "steps": args.steps,
            "seed": seed,
            "optim": {**optim, "warmup_steps": args.warmup},
        }
        configs = []
        if "forward_kl" in args.arms:
            for lr in args.forward_lrs:
                t = {**train_cfg, "batch_size": replies, "optim": {**train_cfg["optim"], "lr": lr}}
                configs.append((f"forward_kl_lr{lr:g}", False, {**forward, "train": t}))
        if "on_policy" in args.arms:
            rollout = {"prompts_per_step": args.prompts, "samples_per_prompt": args.samples}
            prompts = {"n": args.train_prompts, "ops": "+", "split": "train"}
            rollout |= {"tasks": prompts, "max_new_tokens": args.train_max_new_tokens or args.max_new_tokens}
            if divergence is not None:
                rollout["divergence"] = divergence
            if args.beta is not None:
                rollout["beta"] = args.beta
            if args.student_fraction != 1.0:
                rollout["student_fraction"] = args.student_fraction
            if args.teacher_divergence is not None:
                rollout["teacher_divergence"] = args.teacher_divergence
            if args.teacher_kl_weight != 1.0:
                rollout["teacher_kl_weight"] = args.teacher_kl_weight
            if args.sample_temperature != 1.0:  # sample cooler, compare the distributions at T = 1
                rollout |= {"temperature": args.sample_temperature, "divergence_temperature": 1.0}
            t = {**train_cfg, "optim": {**train_cfg["optim"], "lr": args.on_policy_lr}}
            configs.append((on_name, True, {"rollout": rollout, "train": t}))
        for arm, on_policy, extra in configs:
            name = f"{arm}-s{args.steps}-w{args.warmup}-seed{seed}"
            cfg = {**base, "name": name, "student": {"model": str(warm_dir)}, **extra}
            run_dir = out / name
            t1 = time.perf_counter()
            summary = distill(cfg, on_policy=on_policy)
            fresh = time.perf_counter() - t1
            timing = run_dir / "bench_train_s.json"  # the first invocation's training time, kept
            if not timing.exists():
                timing.write_text(json.dumps({"train_s": fresh, "load_avg": list(os.getloadavg())}))
            row = {"seed": seed, "steps": summary["steps"], **json.loads(timing.read_text())}
            row.update(teacher_compute(run_dir, targets))
            row["teacher_scored_tokens"] = row["scored_positions"]
            row.update(measured(run_dir))
            arms.setdefault(arm, []).append(row)
            say(f"{arm} seed {seed}: { {k: row[k] for k in (*METRICS, 'train_s', 'teacher_scored_tokens')} }", t0)
    for arm, rows in arms.items():
        keys = (*METRICS, "train_s", "teacher_scored_tokens", "forward_tokens")
        results["arms"][arm] = {"runs": rows, **{k: interval([r[k] for r in rows]) for k in keys}}
    results["paired"] = {
        f"{on_name}_minus_{arm}": paired(arms[arm], arms[on_name])
        for arm in arms
        if arm.startswith("forward_kl") and on_name in arms
    }
    results.update(
        setup={**vars(args), "student_layers": LAYERS, "replies_per_step": replies, "prompts_measured": len(tasks)},
        wall_s=time.perf_counter() - t0,
        load_avg_before=load_before,
        load_avg_after=list(os.getloadavg()),
        cpu=cpu_name(),
    )
    path = RESULTS / args.result
    kept = json.loads(path.read_text()) if path.exists() else {}
    if args.split == "val":  # a tuning run: filed under `tuning`, beside the held-out figures
        kept.setdefault("tuning", {})[f"{on_name}-s{args.steps}-w{args.warmup}"] = results
        results = kept
    else:  # the written-by-hand verdict and the earlier tries and tuning stay
        hand = ("claim", "verdict", "tries", "tuning", "tuning_rule", "diagnosis", "first_choice")
        hand += ("tuning_after_choice", "arms_after_choice", "paired_after_choice")
        results |= {k: kept[k] for k in hand if k in kept}
    path.write_text(json.dumps(results, indent=1))
    say(f"wrote bench/results/{args.result}", t0)


if __name__ == "__main__":
    main()
