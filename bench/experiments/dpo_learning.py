"""DPO on verifier-built pairs raises held-out *strict* arithmetic accuracy.

    python bench/experiments/dpo_learning.py --pairs PAIRS.jsonl [--seeds 0 1 2] [--steps 40] [--work /tmp/dpo_learning]

PAIRS.jsonl comes from `temper data pairs` (the default model's own samples on the *train*
split of builtin arithmetic, judged by the verifier: strict-vs-sloppy and correct-vs-wrong
pairs). For each seed, `temper dpo` trains a LoRA adapter from the default model. Then every
model (the start and each seed's adapter) runs through `temper eval run`:

  * `arith-add-strict` (built here): 100 two-digit additions from the *held-out* split
    (disjoint from training by construction), greedy, scored by the `exact` verifier (the
    final answer must be exactly the number: what the prompt asks);
  * the other built-in suites for the gate (`--gate-suites`, a `--gate-limit` subset each),
    checked by `temper eval compare BASE CAND --gate` with "no significant regression on S".

The gain on the strict suite is a paired bootstrap over tasks (evals.stats.paired_bootstrap)
per seed, and pooled: each task's mean over the three seeds' models against the start.
Writes bench/results/dpo_learning.json. Runs and evaluations already done in `--work` are
reused (a finished `temper dpo` run is reported, not redone; an eval dir with results.json is
kept), so the seeds may also be trained in parallel processes first (as for the recorded
result: three `temper dpo` processes with 1 thread each on a loaded 2-core host, where two
OpenMP threads per process under oversubscription made each step ~5x slower).
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
from _shared.paths import RESULTS, ROOT  # noqa: E402

STRICT_SUITE = "arith-add-strict"


def temper(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, "-m", "tempering.cli", *args]
    print("$ temper " + " ".join(args), flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sys.stderr.write(proc.stderr[-3000:])
    return proc


def strict_suite(work: Path, n: int, split: str = "heldout", seed: int = 0) -> Path:
    """Two-digit additions scored by `exact`, as a suite YAML over a task file: the held-out
    split for the result; a train-split seed the pairs never used for choosing settings."""
    from tempering.data.builtin import arithmetic_tasks

    tasks = arithmetic_tasks(n, seed=seed, split=split, ops="+", verifier={"type": "exact"})
    path = work / "heldout_strict_tasks.jsonl"
    path.write_text("".join(t.model_dump_json(exclude_none=True) + "\n" for t in tasks))
    suite = work / f"{STRICT_SUITE}.yaml"
    suite.write_text(
        json.dumps(
            {
                "name": STRICT_SUITE,
                "track": "reasoning",
                "description": "held-out two-digit additions; the reply must be exactly the number (exact verifier)",
                "tasks": {"source": str(path), "n": n},
                "templates": ["{prompt}"],
                "sampling": {"temperature": 0.0, "n": 1, "max_new_tokens": 16},
                "metrics": ["accuracy"],
                "seeds": 1,
            }
        )
    )
    return suite


def dpo_config(work: Path, pairs: str, args: argparse.Namespace) -> Path:
    cfg = {
        "model": "smollm2-135m-instruct",
        "lora": {"r": 16, "alpha": 32, "last_layers": args.last_layers},
        "data": {"train": [pairs], "max_length": 256},
        "dpo": {"loss": args.loss, "beta": args.beta, "sft_weight": args.sft_weight},
        "train": {
            "steps": args.steps,
            "batch_size": args.batch,
            "threads": args.threads,
            "optim": {"lr": args.lr, "schedule": "constant"},
            "checkpoint": {"every": 1000},
        },
        "out": str(work / "runs"),
    }
    path = work / "dpo.yaml"
    path.write_text(json.dumps(cfg))
    return path


def evaluate(model: str, out: Path, suites: list[str], limit: int | None) -> Path:
    if (out / "results.json").is_file():
        return out
    args = ["eval", "run", *suites, "--model", model, "--out", str(out), "--seeds", "1", "--no-cache"]
    if limit:
        args += ["--limit", str(limit), "--samples", "1"]
    proc = temper(*args)
    if proc.returncode != 0:
        raise SystemExit(f"eval failed for {model}: {proc.stderr[-500:]}")
    return out


def strict_gain(work: Path, seeds: list[int]) -> dict:
    import numpy as np

    from tempering.evals.results import EvalResults
    from tempering.evals.stats import paired_bootstrap

    def scores(path: Path) -> dict[str, float]:
        suite = next(s for s in EvalResults.load(path / "results.json").suites if s.suite == STRICT_SUITE)
        return {t: float(np.mean(v)) for t, v in suite.task_scores.items()}

    base = scores(work / "eval_strict" / "base")
    ids = sorted(base)
    per_seed, cands = {}, []
    for seed in seeds:
        cand = scores(work / "eval_strict" / f"seed{seed}")
        cands.append([cand[t] for t in ids])
        cmp = paired_bootstrap([base[t] for t in ids], cands[-1], seed=seed)
        per_seed[str(seed)] = {"accuracy": float(np.mean(cands[-1])), **cmp.to_dict()}
    pooled = paired_bootstrap([base[t] for t in ids], list(np.mean(cands, axis=0)), seed=0)
    return {
        "base_accuracy": float(np.mean([base[t] for t in ids])),
        "tasks": len(ids),
        "per_seed": per_seed,
        "pooled_gain": pooled.to_dict(),
    }


def gate_one(work: Path, seed: int, suites: list[str]) -> dict:
    """`temper eval compare BASE CAND --gate` with "no significant regression on S" for every suite."""
    rules = work / "gate.yaml"
    rules.write_text(json.dumps([f"no significant regression on {s}" for s in suites]))
    proc = temper(
        "eval",
        "compare",
        str(work / "eval_gate" / "base"),
        str(work / "eval_gate" / f"seed{seed}"),
        "--gate",
        str(rules),
        "--out",
        str(work / "eval_gate" / f"compare{seed}"),
    )
    return {"passed": proc.returncode == 0, "output": proc.stdout[-2500:]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", required=True)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--lr", type=float, default=8e-4)
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--loss", default="dpo")
    p.add_argument("--sft-weight", type=float, default=0.0, help="RPO: weight of the NLL term on chosen.")
    p.add_argument("--last-layers", type=int, default=12)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--heldout", type=int, default=100)
    p.add_argument(
        "--suite-split",
        default="heldout",
        help="heldout: the result; train (with a --suite-seed "
        "the pairs never used): a validation suite for choosing settings.",
    )
    p.add_argument("--suite-seed", type=int, default=0)
    p.add_argument("--gate-suites", nargs="*", default=["arithmetic", "rg-chain-sum", "rg-spell-backward"])
    p.add_argument("--gate-limit", type=int, default=40)
    p.add_argument(
        "--gate-seeds", type=int, nargs="*", default=None, help="Seeds whose models are gated (default: all)."
    )
    p.add_argument("--work", default="/tmp/dpo_learning")
    p.add_argument("--out", default=str(RESULTS / "dpo_learning.json"))
    args = p.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    suite = strict_suite(work, args.heldout, args.suite_split, args.suite_seed)
    cfg = dpo_config(work, str(Path(args.pairs).resolve()), args)
    evaluate("smollm2-135m-instruct", work / "eval_strict" / "base", [str(suite)], None)
    runs = {}
    for seed in args.seeds:
        proc = temper("dpo", str(cfg), "--name", f"dpo-seed{seed}", "--set", f"train.seed={seed}")
        if proc.returncode != 0:
            raise SystemExit(f"dpo seed {seed} failed: {proc.stderr[-800:]}")
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        runs[str(seed)] = {
            k: summary.get(k)
            for k in (
                "steps",
                "train_loss_first",
                "train_loss_last",
                "train_reward_accuracy_last",
                "hit",
                "pairs_per_s",
                "data",
            )
        }
        evaluate(summary["final"], work / "eval_strict" / f"seed{seed}", [str(suite)], None)
    result = {"pairs": str(args.pairs), "settings": vars(args), "runs": runs, "strict": strict_gain(work, args.seeds)}
    print(json.dumps(result["strict"], indent=1), flush=True)
    result["seconds"] = time.time() - t0
    Path(args.out).write_text(json.dumps(result, indent=1))  # written after each phase
    if args.gate_suites:
        evaluate("smollm2-135m-instruct", work / "eval_gate" / "base", args.gate_suites, args.gate_limit)
        result["gate"] = {"suites": args.gate_suites, "limit": args.gate_limit, "samples": 1, "by_seed": {}}
        for seed in args.seeds if args.gate_seeds is None else args.gate_seeds:
            evaluate(
                str(work / "runs" / f"dpo-seed{seed}" / "final"),
                work / "eval_gate" / f"seed{seed}",
                args.gate_suites,
                args.gate_limit,
            )
            result["gate"]["by_seed"][str(seed)] = gate_one(work, seed, args.gate_suites)
            result["seconds"] = time.time() - t0
            Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result[k] for k in ("strict", "seconds")}, indent=1))


if __name__ == "__main__":
    main()
