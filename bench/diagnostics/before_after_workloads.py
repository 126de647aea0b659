"""One workload of bench/diagnostics/before_after.py, run in a fresh process against one source tree.

    PYTHONPATH=TREE/src:TREE python bench/diagnostics/before_after_workloads.py {sft,grpo,eval} SPEC.json OUT.json

The driver starts this file (always its own copy, so both trees run the same workload code) with
the tree under test first on PYTHONPATH; everything below imports `tempering` from that tree, and
the result records which file it imported. Each workload goes through the path a user's command
takes, with a config file:

- `sft`: `temper sft CONFIG` (`cli.common.train_from_config` with `recipes.sft.run_sft`);
- `grpo`: `temper grpo CONFIG` (the same with `recipes.grpo.run_grpo`), no held-out set;
- `eval`: `temper eval run --config CONFIG` (`evals.evaluate.evaluate_config`).

The training figures come from the run's own event stream (`metrics.jsonl`, one record per step,
stamped with the wall time when it was written): the work of steps 2..N over the wall time from
step 1's record to step N's, so the first (warm-up) step is left out and everything the run does
between steps (logging, callbacks, checkpoint checks) is in. Eval: samples (every generation in
samples.jsonl: tasks x templates x samples) over the wall time of the `evaluate_config` call (model
load included). Each result names the work done (tokens, completions, samples) and what a same-seed
run should reproduce (losses, rewards, scores, the eval's generated text), so the driver can check
that both trees did the same work.

No API difference between the trees measured so far (main at 896a448, m56) needs a branch here:
the configs use keys both accept (no held-out set in GRPO, where `heldout.every` became
`train.eval_every`), and the event stream is read as JSON lines, not through either tree's reader.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

THREADS = 2
SEED = 0
MODEL = "smollm2-135m-instruct"
# The composite reward of examples/grpo_arith.yaml, written out so both trees score alike.
REWARD = [
    {"name": "correct", "weight": 1.0, "verifier": {"type": "numeric"}},
    {"name": "strict", "weight": 1.0, "verifier": {"type": "exact"}},
    {"name": "close", "weight": 0.25, "verifier": {"type": "numeric_close", "scale": 10}},
    {"name": "close_bare", "weight": 0.5, "verifier": {"type": "numeric_close", "scale": 10, "bare_only": True}},
]


def step_records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The per-step records of a run's metrics.jsonl (events left out), in step order."""
    lines = (Path(run_dir) / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return sorted((r for r in records if "event" not in r and "step" in r and "step_s" in r), key=lambda r: r["step"])


def after_first_step(records: list[dict[str, Any]], key: str) -> dict[str, float]:
    """`key` summed over steps 2..N per wall second from step 1's record to step N's, and per
    second of the steps' own `step_s` (the Trainer's clock of one step, generation included)."""
    timed = records[1:]
    if not timed:
        raise ValueError("need at least 2 steps: the first is the warm-up")
    work = sum(r[key] for r in timed)
    wall = records[-1]["time"] - records[0]["time"]
    steps_s = sum(r["step_s"] for r in timed)
    return {"work": work, "wall_s": wall, "per_wall_s": work / wall, "per_step_s": work / steps_s}


def _train(kind: str, config: dict[str, Any], path: Path) -> dict[str, Any]:
    import yaml

    from tempering.cli.common import train_from_config

    path.write_text(yaml.safe_dump(config))
    if kind == "sft":
        from tempering.config import SFTConfig
        from tempering.recipes.sft import run_sft

        return train_from_config(SFTConfig, run_sft, path, [], {})
    from tempering.config import GRPOConfig
    from tempering.recipes.grpo import run_grpo

    return train_from_config(GRPOConfig, run_grpo, path, [], {})


def train_settings(spec: dict[str, Any], lr: float) -> dict[str, Any]:
    return {
        "steps": spec["steps"],
        "seed": SEED,
        "precision": spec["precision"],
        "threads": THREADS,  # a count: "auto" reads the load average, which would differ between runs
        "log_every": 1,
        "optim": {"lr": lr, "schedule": "constant", "warmup_steps": 0},
        "checkpoint": {"every": 10_000, "keep_last": 1},
    }


def sft(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    config = {
        "model": MODEL,
        "lora": {"r": 16, "alpha": 32},
        "out": str(work / "runs"),
        "name": "sft",
        "data": {"train": [spec["data"]], "max_length": spec["max_length"], "packing": True},
        "train": {**train_settings(spec, 1e-4), "batch_size": spec["batch"]},
    }
    summary = _train("sft", config, work / "sft.yaml")
    records = step_records(summary["run_dir"])
    rate = after_first_step(records, "real_tokens")
    return {
        "figure": rate["per_wall_s"],
        "unit": "tokens/s",
        "timing": rate,
        "work": {"steps": len(records), "tokens": sum(r["real_tokens"] for r in records)},
        "reproduced": {"losses": [r["loss"] for r in records], "final_loss": summary["train_loss_last"]},
    }


def grpo(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    config = {
        "model": MODEL,
        "lora": {"r": 16, "alpha": 32},
        "out": str(work / "runs"),
        "name": "grpo",
        "heldout": None,
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": spec["tasks"], "seed": SEED, "split": "train"},
        "reward": REWARD,
        "grpo": {
            "prompts_per_step": spec["prompts"],
            "group_size": spec["group"],
            "max_new_tokens": spec["max_new_tokens"],
            "temperature": 1.0,
            "beta": 0.0,
            "updates_per_batch": 1,
            "dynamic_sampling": False,  # a fixed number of completions a step
            "generation_chunks": 1,
            "truncation": "keep",
        },
        "train": train_settings(spec, 2e-4),
    }
    summary = _train("grpo", config, work / "grpo.yaml")
    records = step_records(summary["run_dir"])
    rate = after_first_step(records, "completions")
    return {
        "figure": rate["per_wall_s"],
        "unit": "completions/s",
        "timing": rate,
        "work": {
            "steps": len(records),
            "completions": sum(r["completions"] for r in records),
            "completion_tokens": sum(r["completions"] * r["response_len"] for r in records),
        },
        "reproduced": {
            "rewards": [r["reward_mean"] for r in records],
            "losses": [r["loss"] for r in records],
            "final_loss": summary["train_loss_last"],
        },
    }


def evaluate(spec: dict[str, Any], work: Path) -> dict[str, Any]:
    import yaml

    from tempering.config import load_config
    from tempering.config.eval import EvalConfig
    from tempering.evals.evaluate import evaluate_config

    path = work / "eval.yaml"
    config = {
        "suites": [spec["suite"]],
        "model": MODEL,
        "out": str(work / "eval"),
        "seeds": 1,
        "first_seed": SEED,
        "limit": spec["limit"],
        "cache": False,  # a cached result would measure nothing
        "threads": THREADS,
        "precision": spec["precision"],
    }
    path.write_text(yaml.safe_dump(config))
    cfg = load_config(EvalConfig, path, [], {})
    t0 = time.perf_counter()
    results = evaluate_config(cfg, warn=lambda line: None, log=lambda line: None)
    seconds = time.perf_counter() - t0
    rows = [json.loads(line) for line in (work / "eval" / "samples.jsonl").read_text().splitlines() if line.strip()]
    return {
        "figure": len(rows) / seconds,
        "unit": "samples/s",
        "timing": {"work": len(rows), "wall_s": seconds},
        "work": {"samples": len(rows), "tasks": sum(len(s.task_scores) for s in results.suites)},
        "reproduced": {
            "primary": {s.suite: [s.primary_metric, s.metrics[s.primary_metric].mean] for s in results.suites},
            "completions_sha256": completions_hash(rows),
        },
    }


def completions_hash(rows: list[dict[str, Any]]) -> str:
    """sha256 of every sample's (task, template, seed, sample, completion), in that order: equal
    hashes mean both trees generated the same text for every sample."""
    keys = ("suite", "task_id", "template", "seed", "sample")
    ordered = sorted(rows, key=lambda r: [str(r.get(k)) for k in keys])
    text = json.dumps([[*(r.get(k) for k in keys), r.get("completion")] for r in ordered])
    return hashlib.sha256(text.encode()).hexdigest()


WORKLOADS = {"sft": sft, "grpo": grpo, "eval": evaluate}


def main(workload: str, spec_path: str, out_path: str) -> None:
    import torch

    import tempering
    from tempering.models.precision import resolve_precision

    torch.set_num_threads(THREADS)
    torch.manual_seed(SEED)
    spec = json.loads(Path(spec_path).read_text())
    work = Path(spec["work"])
    work.mkdir(parents=True, exist_ok=True)
    os.environ["TEMPERING_REGISTRY"] = str(work / "registry.sqlite")  # never the user's registry
    t0 = time.perf_counter()
    result = WORKLOADS[workload](spec, work)
    result.update(
        process_s=time.perf_counter() - t0,
        tempering_file=tempering.__file__,
        precision=resolve_precision(spec["precision"]),
        torch_threads=torch.get_num_threads(),
        torch_version=torch.__version__,
    )
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:4])
