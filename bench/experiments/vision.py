"""Does the assembled VLM learn to see? Held-out accuracy on the five synthetic visual tasks before
and after the two-stage SFT recipe (projector alignment, then LoRA), per task and seed, with paired CIs.

    python bench/experiments/vision.py --seeds 0 1 2 --lm-layers 4 --out bench/results/vision.json

Per seed: assemble a VLM (a new SigLIP-shaped encoder + projector, seeded, over the default model's
weights, optionally cut to its first `--lm-layers` decoder layers), write the mixed training
conversations of the five tasks (train split) and the held-out tasks (held-out split: disjoint by
seed stream and by layout), measure held-out accuracy greedily through the one rollout path and
the tasks' own verifiers, run stage 1 (`vision_sft`, parts vision + projector: the encoder is
random, so it trains too) and stage 2 (`vision_sft`, projector + LoRA on the language model), and
measure again. Gains are paired per held-out item (after - before); the CI is a paired bootstrap
over items. `min_task_gain_ci_low` is the lowest CI low over tasks and seeds. Because the untrained
model answers nothing parseable (0 on every task, below chance), each task also reports its
accuracy after training against chance: `above_chance_ci_low` (bootstrap CI low of the after
accuracy minus the chance of a uniform guess), and `min_task_above_chance_ci_low` over tasks and seeds.

    python bench/experiments/vision.py --rescore bench/results/vision.json   # re-measure saved models
    python bench/experiments/vision.py --collect s0.json s1.json s2.json    # seeds run as separate processes

GRPO over SFT: from each seed's SFT model (a single-seed result), a short `temper grpo` on a task
(`count` by default: `vision:count` train split at the bench's image size, the stage-2 adapter
continued), then greedy held-out accuracy on the very items the SFT-only model was scored on;
gains are paired per item, per seed and pooled over seeds (all seeds' items as one paired set).
Every try (task, lr, steps) is kept; `grpo_over_sft_gain_ci_low` is the pooled CI low of the try
named by `--grpo-headline`.

    python bench/experiments/vision.py --grpo-from s0.json --grpo-lr 5e-4 --grpo-steps 60 --out g0.json
    python bench/experiments/vision.py --collect s0.json s1.json s2.json --grpo-results g0.json g1.json g2.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, cpu_name  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}] {msg}", flush=True)


def assemble(out: Path, seed: int, lm_layers: int, image_size: int, patch: int) -> Path:
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.vlm import VisionTower, assemble_vlm, keep_first_layers, save_vlm

    lm = load_model("smollm2-135m-instruct")
    if lm_layers:
        lm = keep_first_layers(lm, lm_layers)
    tower = VisionTower(image_size=image_size, patch_size=patch)
    model, processor = assemble_vlm(lm, load_tokenizer("smollm2-135m-instruct"), tower, seed=seed)
    return save_vlm(model, processor, out)


def write_data(work: Path, seed: int, args: argparse.Namespace) -> tuple[Path, dict]:
    from tempering.atomic import write_jsonl_atomic
    from tempering.data.vision_tasks import VISION_TASKS, sft_rows, vision_tasks

    rows, held = [], {}
    weights = task_weights(args.task_weight)
    for name in VISION_TASKS:
        n = round(args.train_per_task * weights.get(name, 1.0))
        rows += sft_rows(vision_tasks(name, n, seed, "train", args.image_size))
        held[name] = vision_tasks(name, args.heldout_per_task, seed, "heldout", args.image_size)
    import random

    random.Random(seed).shuffle(rows)
    write_jsonl_atomic(work / "train.jsonl", rows, sidecar=False)
    return work / "train.jsonl", held


def task_weights(specs: list[str]) -> dict[str, float]:
    """`NAME=W` pairs: task NAME gets W x --train-per-task training conversations (more distinct
    pictures of the harder tasks, not repeats)."""
    from tempering.data.vision_tasks import VISION_TASKS

    out = {}
    for spec in specs:
        name, _, w = spec.partition("=")
        if name not in VISION_TASKS or not w.replace(".", "", 1).isdigit():
            raise SystemExit(f"--task-weight {spec!r}: expected NAME=W (W > 0), NAME one of {', '.join(VISION_TASKS)}")
        out[name] = float(w)
    return out


def accuracy(model_dir: str, held: dict) -> dict[str, list[float]]:
    """Per task, 1/0 per held-out item: greedy answers scored by the tasks' verifiers."""
    from tempering.config import EngineSettings, SamplingSettings
    from tempering.rollout.rollout import ThreadRewardWorkers, rollout
    from tempering.rollout.select import load_engine

    engine = load_engine(EngineSettings(kind="hf"), model_dir, "auto")
    sampling = SamplingSettings(temperature=0.0, max_new_tokens=8)
    out = {}
    with ThreadRewardWorkers(2) as workers:
        for name, tasks in held.items():
            groups = rollout(tasks, engine, sampling, workers, n=1, seed=0)
            out[name] = [1.0 if g[0].reward is not None and g[0].reward.passed else 0.0 for g in groups]
    return out


def stage(
    model: str,
    train: Path,
    work: Path,
    name: str,
    parts: list[str],
    lora: dict | None,
    steps: int,
    lr: float,
    seed: int,
):
    from tempering.config import VisionSFTConfig
    from tempering.recipes.vision import run_vision_sft

    cfg = VisionSFTConfig.model_validate(
        {
            "model": model,
            "parts": parts,
            "lora": lora,
            "out": str(work / "runs"),
            "name": name,
            "data": {"train": [str(train)], "packing": False, "max_length": 256},
            "train": {
                "steps": steps,
                "batch_size": 8,
                "seed": seed,
                "precision": "auto",
                "optim": {"lr": lr, "warmup_steps": 5, "schedule": "cosine"},
                "checkpoint": {"every": 500, "keep_last": 2},  # a rollback (a loss spike) goes back 500 steps at most
            },
        }
    )
    t0 = time.time()
    summary = run_vision_sft(cfg, force=True)
    log(
        f"{name}: loss {summary['train_loss_first']:.3f} -> {summary['train_loss_last']:.3f} in {time.time() - t0:.0f}s"
    )
    return summary, time.time() - t0


def run_seed(seed: int, args: argparse.Namespace) -> dict:
    work = Path(args.work) / f"s{seed}"
    work.mkdir(parents=True, exist_ok=True)
    vlm = assemble(work / "vlm", seed, args.lm_layers, args.image_size, args.patch_size)
    train, held = write_data(work, seed, args)
    log(f"seed {seed}: assembled {vlm}, {sum(1 for _ in open(train))} training conversations")
    before = accuracy(str(vlm), held)
    log(f"seed {seed}: before " + ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in before.items()))
    s1, t1 = stage(
        str(vlm), train, work, f"s{seed}-align", ["vision", "projector"], None, args.stage1_steps, args.lr1, seed
    )
    mid = accuracy(s1["final"], held)
    log(f"seed {seed}: after stage 1 " + ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in mid.items()))
    lora = {"r": 16, "alpha": 32}
    s2, t2 = stage(
        s1["final"], train, work, f"s{seed}-lora", args.stage2_parts, lora, args.stage2_steps, args.lr2, seed
    )
    after = accuracy(s2["final"], held)
    log(f"seed {seed}: after stage 2 " + ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in after.items()))
    return {
        "seed": seed,
        "before": before,
        "after_stage1": mid,
        "after": after,
        "final": s2["final"],
        "stage_seconds": [round(t1, 1), round(t2, 1)],
        "losses": {
            "stage1": [s1["train_loss_first"], s1["train_loss_last"]],
            "stage2": [s2["train_loss_first"], s2["train_loss_last"]],
        },
        "trainable": {"stage1": s1["trainable_parameters"], "stage2": s2["trainable_parameters"]},
    }


def grpo_stage(sft: dict, task: str, lr: float, args: argparse.Namespace) -> dict:
    """A short GRPO on `task` from one seed's SFT model (an adapter continued: only LoRA trains), then
    held-out accuracy on the very items the SFT-only model was scored on (the SFT result's verdicts)."""
    from tempering.config import GRPOConfig
    from tempering.data.vision_tasks import vision_tasks
    from tempering.evals.stats import paired_bootstrap
    from tempering.recipes.grpo import run_grpo

    seed, final = sft["seed"], sft["final"]
    work = Path(final).parents[2]
    model = final
    if args.grpo_beta:  # KL to the SFT model: merge its adapter (the reference is the adapter-off model)
        from tempering.models.lora import export_merged

        model = str(export_merged(final, str(work / f"s{seed}-sft-merged")))
    replica = args.grpo_replica  # another GRPO draw (task order, samples) from the same SFT model
    temp = "" if args.grpo_temperature == 1.0 else f"-t{args.grpo_temperature:g}"
    temp += f"-b{args.grpo_beta:g}" if args.grpo_beta else ""
    name = f"s{seed}-grpo-{task}-lr{lr:g}-{args.grpo_steps}steps{temp}" + (f"-r{replica}" if replica else "")
    cfg = GRPOConfig.model_validate(
        {
            "model": model,
            "lora": {"r": 16, "alpha": 32},  # the SFT adapter continued (its own r/alpha), or a new one on the merge
            "tasks": {"source": f"vision:{task}", "n": args.grpo_tasks, "seed": seed, "image_size": args.image_size},
            "heldout": None,
            "grpo": {
                "prompts_per_step": args.grpo_prompts,
                "group_size": args.grpo_group,
                "max_new_tokens": 6,
                "temperature": args.grpo_temperature,
                "beta": args.grpo_beta,
                "dynamic_sampling": True,
                "max_refills": args.grpo_refills,
                "generation_chunks": 1,
            },
            "engine": {"kind": "hf"},
            "train": {
                "steps": args.grpo_steps,
                "seed": seed + 1000 * replica,
                "precision": "fp32",
                "optim": {"lr": lr, "warmup_steps": 2, "schedule": "constant"},
                "checkpoint": {"every": 10_000},
            },
            "out": str(work / "runs"),
            "name": name,
        }
    )
    t0, load0 = time.time(), os.getloadavg()[0]
    summary = run_grpo(cfg, force=True)
    seconds = time.time() - t0
    steps = [json.loads(x) for x in (work / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in steps if "reward_mean" in r]
    held = {task: vision_tasks(task, args.heldout_per_task, seed, "heldout", args.image_size)}
    after = accuracy(summary["final"], held)[task]
    before = next(x for x in sft["tasks"][task]["seeds"] if x["seed"] == seed)["items_after"]
    c = paired_bootstrap(before, after, seed=seed)
    log(
        f"seed {seed} grpo {task} lr {lr:g}: {sum(before) / len(before):.3f} -> {sum(after) / len(after):.3f}, gain CI [{c.low:+.3f}, {c.high:+.3f}] in {seconds:.0f}s"
    )
    mean = lambda key: sum(r.get(key, 0.0) for r in steps) / max(len(steps), 1)  # noqa: E731
    return {
        "seed": seed,
        "task": task,
        "lr": lr,
        "steps": len(steps),
        "temperature": args.grpo_temperature,
        "beta": args.grpo_beta,
        "replica": replica,
        "final": summary["final"],
        "sft": sum(before) / len(before),
        "grpo": sum(after) / len(after),
        "gain": c.delta,
        "gain_ci": [c.low, c.high],
        "items_sft": before,
        "items_grpo": after,
        "train": {
            "reward_first": steps[0]["reward_mean"] if steps else None,
            "reward_last": steps[-1]["reward_mean"] if steps else None,
            "reward_mean": mean("reward_mean"),
            "sample_accuracy_first5": sum(r["accuracy"] for r in steps[:5]) / max(len(steps[:5]), 1),
            "sample_accuracy_last5": sum(r["accuracy"] for r in steps[-5:]) / max(len(steps[-5:]), 1),
            "zero_variance_share_mean": mean("zero_variance_share"),
            "groups_kept_mean": mean("groups_kept"),
            "logprob_mismatch_mean": mean("logprob_mismatch"),
            "logprob_mismatch_max": max((r.get("logprob_mismatch", 0.0) for r in steps), default=None),
            "parse_failure_rate_mean": mean("parse_failure_rate"),
        },
        "seconds": round(seconds, 1),
        "load_average_start_end": [load0, os.getloadavg()[0]],
    }


def run_grpo_tries(args: argparse.Namespace) -> None:
    """GRPO from each given single-seed SFT result, per task and learning rate; one JSON of tries at --out."""
    tries = []
    for path in args.grpo_from:
        sft = json.loads(Path(path).read_text())
        sft_seed = sft["per_seed"][0]
        sft_view = {"seed": sft_seed["seed"], "final": sft_seed["final"], "tasks": sft["tasks"]}
        for task in args.grpo_task:
            for lr in args.grpo_lr:
                tries.append(grpo_stage(sft_view, task, lr, args))
                Path(args.out).write_text(json.dumps({"tries": tries, "setup": grpo_setup(args)}, indent=1))


def grpo_setup(args: argparse.Namespace) -> dict:
    return {
        k: getattr(args, k)
        for k in (
            "grpo_steps",
            "grpo_prompts",
            "grpo_group",
            "grpo_refills",
            "grpo_tasks",
            "grpo_temperature",
            "grpo_beta",
            "image_size",
        )
    } | {
        "what": "GRPO (dapo loss, beta --grpo-beta: k3 KL to the adapter-off model, dynamic sampling: tied groups dropped and refilled) continuing each "
        "seed's stage-2 LoRA adapter (LoRA only trains), fp32, hf engine, max_new_tokens 6; "
        "reward: the task's own verifier"
    }


def grpo_key(t: dict) -> str:
    """A try's name: task, learning rate and GRPO steps, e.g. `count@lr0.0005x60`."""
    replica, temp, beta = t.get("replica", 0), t.get("temperature", 1.0), t.get("beta", 0.0)
    return (
        f"{t['task']}@lr{t['lr']:g}x{t['steps']}"
        + (f"@t{temp:g}" if temp != 1.0 else "")
        + (f"@b{beta:g}" if beta else "")
        + (f"#r{replica}" if replica else "")
    )


def grpo_summary(tries: list[dict], headline: str) -> dict:
    """Per try (task, lr): per-seed gains with paired CIs, and the pooled CI (every seed's held-out
    items as one paired set). `grpo_over_sft_gain_ci_low`: the pooled CI low of the `headline` try."""
    from tempering.evals.stats import paired_bootstrap

    by: dict[str, list[dict]] = {}
    for t in tries:
        by.setdefault(grpo_key(t), []).append(t)
    out = {}
    for key, runs in by.items():
        runs = sorted(runs, key=lambda r: r["seed"])
        a = [x for r in runs for x in r["items_sft"]]
        b = [x for r in runs for x in r["items_grpo"]]
        pooled = paired_bootstrap(a, b, seed=0)
        out[key] = {
            "task": runs[0]["task"],
            "lr": runs[0]["lr"],
            "steps": runs[0]["steps"],
            "seeds": [{k: v for k, v in r.items() if k not in ("items_sft", "items_grpo")} | {
                "items_sft": r["items_sft"], "items_grpo": r["items_grpo"]} for r in runs],
            "sft_mean": sum(a) / len(a),
            "grpo_mean": sum(b) / len(b),
            "pooled_gain": pooled.delta,
            "pooled_gain_ci": [pooled.low, pooled.high],
            "pooled_items": len(a),
        }  # fmt: skip
    head = out.get(headline)
    return {
        "grpo_over_sft_gain_ci_low": head["pooled_gain_ci"][0] if head else None,
        "grpo_headline": headline,
        "grpo_pooling": "each seed's 40 held-out items paired (SFT-only vs SFT+GRPO, greedy, the task's verifier); "
        "the 3 seeds' pairs pooled into one set of 120 and one paired bootstrap (2,000 resamples, 95%)",
        "grpo": out,
    }


def summarise(seeds: list[dict], args: argparse.Namespace, wall: float, loads: list) -> dict:
    from tempering.data.vision_tasks import CHANCE, VISION_TASKS
    from tempering.evals.stats import bootstrap_ci, paired_bootstrap

    tasks = {}
    lows, above = [], []
    for name in VISION_TASKS:
        per_seed = []
        for r in seeds:
            c = paired_bootstrap(r["before"][name], r["after"][name], seed=r["seed"])
            a = bootstrap_ci(r["after"][name], seed=r["seed"])
            mid = sum(r["after_stage1"][name]) / len(r["after_stage1"][name])
            per_seed.append(
                {
                    "seed": r["seed"],
                    "before": sum(r["before"][name]) / len(r["before"][name]),
                    "after_stage1": mid,
                    "after": a.mean,
                    "after_ci": [a.low, a.high],
                    "above_chance_ci_low": a.low - CHANCE[name],
                    "gain": c.delta,
                    "gain_ci": [c.low, c.high],
                    "items": c.n,
                    "items_before": r["before"][name],
                    "items_after": r["after"][name],
                }
            )
            lows.append(c.low)
            above.append(a.low - CHANCE[name])
        tasks[name] = {
            "chance": CHANCE[name],
            "seeds": per_seed,
            "after_mean": sum(s["after"] for s in per_seed) / len(per_seed),
            "min_gain_ci_low": min(s["gain_ci"][0] for s in per_seed),
            "min_above_chance_ci_low": min(s["above_chance_ci_low"] for s in per_seed),
        }
    return {
        "what": "held-out accuracy of the assembled VLM on five synthetic visual tasks, before vs after two-stage SFT",
        "tasks": tasks,
        "min_task_gain_ci_low": min(lows),
        "min_task_above_chance_ci_low": min(above),
        "grpo_over_sft_gain_ci_low": None,
        "grpo_note": "not measured: GRPO batches do not carry image inputs yet (docs/vision.md)",
        "setup": {
            **{k: v for k, v in vars(args).items() if k not in ("out", "work")},
            "language_model": f"smollm2-135m-instruct, first {args.lm_layers or 30} of 30 decoder layers",
            "vision": "SigLIP-shaped ViT, random init, trained in stage 1",
            "ci": "paired bootstrap over held-out items (after - before), 95%; above chance: bootstrap CI low of the after accuracy minus chance",
        },
        "per_seed": [{k: v for k, v in r.items() if k not in ("before", "after", "after_stage1")} for r in seeds],
        "wall_seconds": round(wall, 1),
        "machine": {
            "cpu": cpu_name(),
            "cores": os.cpu_count(),
            "load_average_start_end": loads,
            "note": getattr(args, "ran_beside", None) or "nothing else heavy ran beside it",
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--lm-layers", type=int, default=4)
    p.add_argument("--image-size", type=int, default=48)
    p.add_argument("--patch-size", type=int, default=8)
    p.add_argument("--train-per-task", type=int, default=3000)
    p.add_argument("--heldout-per-task", type=int, default=40)
    p.add_argument("--task-weight", nargs="*", default=[], help="NAME=W: W x --train-per-task rows of task NAME")
    p.add_argument("--stage1-steps", type=int, default=3000)
    p.add_argument("--stage2-steps", type=int, default=600)
    p.add_argument("--lr1", type=float, default=1e-3)
    p.add_argument("--lr2", type=float, default=1e-3)
    p.add_argument("--stage2-parts", nargs="+", default=["projector"], help="VLM parts trained beside LoRA in stage 2")
    p.add_argument("--work", default="/tmp/tempering-vision-bench")
    p.add_argument("--out", default=str(RESULTS / "vision.json"))
    p.add_argument("--rescore", help="a result JSON: re-measure its seeds' saved models and rewrite it (no training)")
    p.add_argument("--collect", nargs="+", help="result JSONs of single seeds (run side by side): one result at --out")
    p.add_argument("--grpo-from", nargs="+", help="single-seed SFT result JSONs: run GRPO from their models")
    p.add_argument("--grpo-task", nargs="+", default=["count"])
    p.add_argument("--grpo-lr", type=float, nargs="+", default=[5e-4])
    p.add_argument("--grpo-steps", type=int, default=60)
    p.add_argument("--grpo-prompts", type=int, default=8, help="groups (prompts) per GRPO step")
    p.add_argument("--grpo-group", type=int, default=8, help="samples per prompt")
    p.add_argument("--grpo-temperature", type=float, default=1.0, help="sampling temperature of the GRPO rollouts")
    p.add_argument("--grpo-beta", type=float, default=0.0, help="KL weight to the adapter-off model")
    p.add_argument("--grpo-refills", type=int, default=2, help="dynamic sampling: refill rounds for tied groups")
    p.add_argument("--grpo-tasks", type=int, default=400, help="training tasks drawn for GRPO (train split)")
    p.add_argument("--grpo-replica", type=int, default=0, help="another GRPO draw: train.seed = seed + 1000 x this")
    p.add_argument("--grpo-results", nargs="+", help="with --collect: JSONs of GRPO tries (--grpo-from) to add")
    p.add_argument("--grpo-note", default="", help="with --collect: how the headline try was chosen (kept in the JSON)")
    p.add_argument("--ran-beside", default="", help="what else ran on the machine (kept in the JSON's machine note)")
    p.add_argument("--grpo-headline", default="count@lr0.0005x60", help="the try whose pooled CI low is the figure")
    args = p.parse_args()
    if args.rescore:
        return rescore(Path(args.rescore))
    if args.grpo_from:
        return run_grpo_tries(args)
    if args.collect:
        return collect([Path(c) for c in args.collect], Path(args.out), args)
    t0, loads = time.time(), [os.getloadavg()[0]]
    seeds = [run_seed(s, args) for s in args.seeds]
    loads.append(os.getloadavg()[0])
    result = summarise(seeds, args, time.time() - t0, loads)
    Path(args.out).write_text(json.dumps(result, indent=1))
    for name, t in result["tasks"].items():
        log(
            f"{name:13s} chance {t['chance']:.2f}  after {t['after_mean']:.2f}  min gain CI low {t['min_gain_ci_low']:+.2f}"
        )
    log(f"min_task_gain_ci_low {result['min_task_gain_ci_low']:+.3f}; wrote {args.out}")


def collect(paths: list[Path], out: Path, cli: argparse.Namespace | None = None) -> None:
    """One result from single-seed results (their per-item verdicts are in each task's seeds)."""
    parts = [json.loads(p.read_text()) for p in paths]
    seeds = []
    for part in parts:
        for r in part["per_seed"]:
            items = {n: next(s for s in t["seeds"] if s["seed"] == r["seed"]) for n, t in part["tasks"].items()}
            mid = {n: [s["after_stage1"]] for n, s in items.items()}  # a mean only: kept as one value
            seeds.append(
                {
                    **r,
                    "before": {n: s["items_before"] for n, s in items.items()},
                    "after": {n: s["items_after"] for n, s in items.items()},
                    "after_stage1": mid,
                }
            )
    args = argparse.Namespace(**{**parts[0]["setup"], "seeds": [r["seed"] for r in seeds]})
    wall = max(p["wall_seconds"] for p in parts)
    loads = [
        min(p["machine"]["load_average_start_end"][0] for p in parts),
        max(p["machine"]["load_average_start_end"][-1] for p in parts),
    ]
    if cli is not None and cli.ran_beside:
        args.ran_beside = cli.ran_beside
    result = summarise(seeds, args, wall, loads)
    result["machine"]["note"] += f"; the {len(parts)} seeds ran side by side as separate processes (wall: the longest)"
    if cli is not None and cli.grpo_results:
        runs = [json.loads(Path(g).read_text()) for g in cli.grpo_results]
        tries = [t for r in runs for t in r["tries"]]
        result.pop("grpo_note", None)
        result.update(grpo_summary(tries, cli.grpo_headline))
        result["grpo_headline_note"] = cli.grpo_note
        result["what"] += "; then a short GRPO on counting from each seed's SFT model, SFT-only vs SFT+GRPO"
        result["grpo_setup"] = runs[0]["setup"]
        result["grpo_machine"] = {
            "wall_seconds_per_try": {f"s{t['seed']} {grpo_key(t)}": t["seconds"] for t in tries},
            "load_average_start_end": [min(t["load_average_start_end"][0] for t in tries),
                                       max(t["load_average_start_end"][1] for t in tries)],
        }  # fmt: skip
    out.write_text(json.dumps(result, indent=1))
    log(
        f"collected {len(seeds)} seeds -> {out}: min_task_gain_ci_low {result['min_task_gain_ci_low']:+.3f}, "
        f"min_task_above_chance_ci_low {result['min_task_above_chance_ci_low']:+.3f}"
    )


def rescore(path: Path) -> None:
    """Re-measure the base, stage-1 and final models of a finished run on the same held-out tasks."""
    old = json.loads(path.read_text())
    args = argparse.Namespace(**old["setup"], out=str(path), work=None)
    t0, loads, seeds = time.time(), [os.getloadavg()[0]], []
    for r in old["per_seed"]:
        work = Path(r["final"]).parents[2]
        from tempering.data.vision_tasks import VISION_TASKS, vision_tasks

        held = {n: vision_tasks(n, args.heldout_per_task, r["seed"], "heldout", args.image_size) for n in VISION_TASKS}
        base = r.get("base") or str(work / "vlm")
        stage1 = r.get("stage1_final") or str(work / "runs" / f"s{r['seed']}-align" / "final")
        measured = {
            "before": accuracy(base, held),
            "after_stage1": accuracy(stage1, held),
            "after": accuracy(r["final"], held),
        }
        log(f"seed {r['seed']}: after " + ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in measured["after"].items()))
        seeds.append({**r, **measured, "base": base, "stage1_final": stage1})
    loads.append(os.getloadavg()[0])
    result = summarise(seeds, args, old["wall_seconds"], old["machine"]["load_average_start_end"])
    result["rescored"] = {"seconds": round(time.time() - t0, 1), "load_average_start_end": loads}
    path.write_text(json.dumps(result, indent=1))
    log(
        f"rescored {path}: min_task_gain_ci_low {result['min_task_gain_ci_low']:+.3f}, "
        f"min_task_above_chance_ci_low {result['min_task_above_chance_ci_low']:+.3f}"
    )


if __name__ == "__main__":
    main()
