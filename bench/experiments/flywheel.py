"""Difficulty stratification and the flywheel on the default model: SFT on self-generated, verified,
reflowed rows raises held-out strict accuracy (docs/mixing.md, "Measured").

    python bench/experiments/flywheel.py [--seeds 0 1 2] [--stratify-n 64] [--synth-n 160] [--heldout-n 150]

On built-in 2-digit addition ("What is A+B? Answer with just the number."):

  1. `temper data stratify`: k samples per task through the one rollout path -> measured
     pass rates -> too-easy / learnable / too-hard -> the RL set (curriculum order);
  2. `temper data synth`: n candidates per training prompt -> verified -> the best correct
     one kept, reflowed to the final answer alone (the prompt asks for just the number)
     -> an SFT set built from the model's own verified outputs;
  3. LoRA SFT of the default model on that set (one run per seed);
  4. held-out (disjoint operand split) greedy accuracy before and after, through the one
     rollout path: final-answer (`numeric`: the last number is right) and strict (`exact`:
     the reply is just the number), each with a 95% bootstrap CI over tasks, and the paired
     bootstrap CI of the gain;
  5. `temper data failures` on the flywheel's failed candidates (real failures, labelled).

Writes bench/results/flywheel.json and the `flywheel` section of bench/results/data_mix.json.
A learning run, not a timed benchmark: no lock needed; what else ran is recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS  # noqa: E402


def heldout_scores(model: str, n: int, max_new_tokens: int) -> dict[str, list[float]]:
    """Per-task greedy final-answer and strict scores on held-out addition (one rollout path)."""
    from tempering.config import EngineSettings, RewardPart, SamplingSettings
    from tempering.data.builtin import arithmetic_tasks
    from tempering.rollout.rollout import ThreadRewardWorkers, rollout
    from tempering.rollout.select import load_engine
    from tempering.sources.tasks import with_reward

    tasks = with_reward(
        arithmetic_tasks(n, seed=1, split="heldout", ops="+"),
        [
            RewardPart(name="correct", verifier={"type": "numeric"}),
            RewardPart(name="strict", verifier={"type": "exact"}),
        ],
    )
    engine = load_engine(EngineSettings(kind="hf"), model)
    with ThreadRewardWorkers(2) as workers:
        groups = rollout(tasks, engine, SamplingSettings(temperature=0, max_new_tokens=max_new_tokens), workers)
    judged = [g[0] for g in groups if g[0].scored]
    return {
        "correct": [t.reward.components.get("correct", 0.0) for t in judged],
        "strict": [t.reward.components.get("strict", 0.0) for t in judged],
        "examples": [t.completion for t in judged[:5]],
        "unjudged": len(groups) - len(judged),
    }


def others_running() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,pcpu,args", "--sort=-pcpu"], capture_output=True, text=True).stdout
    return [line.strip()[:160] for line in out.splitlines()[1:8] if "python" in line and str(os.getpid()) not in line]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--stratify-n", type=int, default=64)
    p.add_argument("--synth-n", type=int, default=160)
    p.add_argument("--k", type=int, default=8, help="candidates per prompt (synth)")
    p.add_argument("--stratify-k", type=int, default=8, help="samples per task (stratify)")
    p.add_argument("--heldout-n", type=int, default=150)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--out", default="/tmp/flywheel-bench")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--tag", default=None, help="reuse the runs of this tag (finished stages are not redone)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    from tempering.config import (
        DEFAULT_MODEL,
        DataSettings,
        LoraSettings,
        OptimSettings,
        SamplingSettings,
        SFTConfig,
        StratifyConfig,
        SynthConfig,
        TaskSourceSettings,
        TrainSettings,
    )
    from tempering.evals.failures import cluster_failures, read_failures
    from tempering.evals.stats import bootstrap_ci, paired_bootstrap
    from tempering.recipes.sft import run_sft
    from tempering.recipes.stratify import run_stratify
    from tempering.recipes.synth import run_synth

    t0 = time.time()
    busy_before = others_running()
    sampling = SamplingSettings(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    tag = args.tag or time.strftime("%H%M%S")
    strat = run_stratify(
        StratifyConfig(
            tasks=TaskSourceSettings(source="builtin:arithmetic", ops="+", n=args.stratify_n, seed=0, split="train"),
            k=args.stratify_k,
            sampling=sampling,
            seed=0,
            out=args.out,
            name=f"fw-stratify-{tag}",
            threads=2,
        )
    )
    print(f"stratify: {strat['buckets']} mean pass rate {strat['mean_pass_rate']:.3f} ({time.time() - t0:.0f}s)")
    synth = run_synth(
        SynthConfig(
            tasks=TaskSourceSettings(source="builtin:arithmetic", ops="+", n=args.synth_n, seed=2, split="train"),
            n=args.k,
            sampling=sampling,
            reflow="final_answer",
            pairs=True,
            seed=0,
            out=args.out,
            name=f"fw-synth-{tag}",
            threads=args.threads,
        )
    )
    print(
        f"synth: kept {synth['kept']}/{synth['tasks']} (reflowed {synth['reflowed']}), "
        f"pass rate {synth['pass_rate']:.3f} ({time.time() - t0:.0f}s)"
    )
    failures = cluster_failures(read_failures(synth.get("failures_file", synth["failures"])), seed=0)

    base = heldout_scores(DEFAULT_MODEL, args.heldout_n, args.max_new_tokens)
    print(
        f"base: correct {sum(base['correct']) / len(base['correct']):.3f} strict "
        f"{sum(base['strict']) / len(base['strict']):.3f} ({time.time() - t0:.0f}s)"
    )
    runs = []
    for seed in args.seeds:
        cfg = SFTConfig(
            model=DEFAULT_MODEL,
            lora=LoraSettings(r=16, alpha=32),
            data=DataSettings(train=[synth.get("sft_file", synth["sft"])], max_length=256, packing=True),
            train=TrainSettings(
                steps=args.steps,
                batch_size=8,
                seed=seed,
                threads=args.threads,
                optim=OptimSettings(lr=1e-3, warmup_steps=4, schedule="cosine"),
            ),
            out=args.out,
            name=f"fw-sft-{tag}-seed{seed}",
        )
        sft = run_sft(cfg)
        after = heldout_scores(sft["final"], args.heldout_n, args.max_new_tokens)
        run = {
            "seed": seed,
            "sft_run": sft["run_dir"],
            "train_loss_first": sft["train_loss_first"],
            "train_loss_last": sft["train_loss_last"],
            "examples_after": after["examples"],
        }
        for metric in ("correct", "strict"):
            run[metric] = {
                "before": bootstrap_ci(base[metric]).to_dict(),
                "after": bootstrap_ci(after[metric]).to_dict(),
                "gain": paired_bootstrap(base[metric], after[metric]).to_dict(),
            }
        runs.append(run)
        print(
            f"seed {seed}: correct {run['correct']['before']['mean']:.3f} -> {run['correct']['after']['mean']:.3f} "
            f"gain CI [{run['correct']['gain']['low']:.3f}, {run['correct']['gain']['high']:.3f}]; strict "
            f"{run['strict']['before']['mean']:.3f} -> {run['strict']['after']['mean']:.3f} gain CI "
            f"[{run['strict']['gain']['low']:.3f}, {run['strict']['gain']['high']:.3f}] ({time.time() - t0:.0f}s)"
        )

    result = {
        "what": "stratification + flywheel on the default model, built-in addition",
        "model": DEFAULT_MODEL,
        "sampling": sampling.model_dump(),
        "synth_n_per_prompt": args.k,
        "stratify_k": args.stratify_k,
        "stratify": {
            k: strat[k]
            for k in (
                "tasks",
                "buckets",
                "rl_set",
                "mean_pass_rate",
                "pass_rate_histogram",
                "rl_set_file",
                "pass_rates",
                "generator_hash",
            )
        },
        "synth": {
            k: synth[k]
            for k in (
                "tasks",
                "candidates",
                "passed",
                "kept",
                "reflowed",
                "reflow_rejected",
                "pass_rate",
                "generator_hash",
            )
        },
        "synth_files": {k: synth.get(f"{k}_file", synth.get(k)) for k in ("sft", "failures", "pairs")},
        "heldout": {
            "tasks": args.heldout_n,
            "split": "builtin:arithmetic heldout seed 1 (odd operand sums, disjoint)",
            "decoding": "greedy",
            "max_new_tokens": args.max_new_tokens,
            "examples_before": base["examples"],
        },
        "sft": {"steps": args.steps, "batch_size": 8, "lora": "r16 alpha32", "lr": 1e-3},
        "runs": runs,
        "failure_clusters_of_flywheel_failures": {
            "failures": failures["failures"],
            "k": failures["k"],
            "clusters": [{k: c[k] for k in ("label", "label_from", "size", "examples")} for c in failures["clusters"]],
        },
        "seconds": round(time.time() - t0, 1),
        "also_running_at_start": busy_before,
        "also_running_at_end": others_running(),
        "precision": "auto (bf16 on this AVX512-BF16 host)",
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "flywheel.json").write_text(json.dumps(result, indent=1))
    mix_path = RESULTS / "data_mix.json"
    mix = json.loads(mix_path.read_text()) if mix_path.is_file() else {}
    mix["flywheel"] = {
        "runs": [
            {
                "seed": r["seed"],
                **{
                    m: {
                        "before": r[m]["before"]["mean"],
                        "after": r[m]["after"]["mean"],
                        "gain": r[m]["gain"]["delta"],
                        "gain_ci": [r[m]["gain"]["low"], r[m]["gain"]["high"]],
                        "after_ci": [r[m]["after"]["low"], r[m]["after"]["high"]],
                        "before_ci": [r[m]["before"]["low"], r[m]["before"]["high"]],
                    }
                    for m in ("correct", "strict")
                },
            }
            for r in runs
        ],
        "stratify_buckets": strat["buckets"],
        "synth_kept": synth["kept"],
        "details": "flywheel.json",
    }
    mix_path.write_text(json.dumps(mix, indent=1))
    print(json.dumps(mix["flywheel"]))


if __name__ == "__main__":
    main()
