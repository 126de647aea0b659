"""Diagnosis of workspace RL after SFT: from one run's SFT'd LoRA weights, 2 GRPO steps (4 tasks x 4
episodes) at a given lr, tasks drawn from the tier as now (an epoch) or with replacement (as before),
then greedy completion on the 20 held-out workspace tier-1 tasks. Prints one ABLATION json line.

    python bench/experiments/agent_rl_ablation.py CHECKPOINT LR {distinct,replace} SEED
    # CHECKPOINT: runs/NAME/checkpoints/step-00000000 (or its weights.safetensors) of a workspace
    # tier-1 `temper agent` run

Each arm is a `temper agent` run (`run_agent`: no SFT phase, the checkpoint's adapter continued),
whose held-out pass before RL is that checkpoint's after-SFT completion.
"""

import json
import sys
import tempfile
from pathlib import Path

from tempering.agents import training as T
from tempering.agents.config import AgentConfig
from tempering.recipes.agent import run_agent
from tempering.tracking.events import read_metrics

checkpoint, lr, replace, seed = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "replace", int(sys.argv[4])
if checkpoint.name == "weights.safetensors":
    checkpoint = checkpoint.parent
if replace:

    def sample(self, n):
        pool = self.by_tier[self.tier]
        return [pool[self.rng.randrange(len(pool))] for _ in range(n)]

    T.Curriculum.sample = sample
root = Path(tempfile.mkdtemp())
cfg = AgentConfig.model_validate(
    {
        "model": str(checkpoint),  # its LoRA adapter (r16, alpha 32, last 12 layers) is continued
        "lora": {"r": 16, "alpha": 32, "dropout": 0.0, "last_layers": 12},
        "out": str(root),
        "name": "ablation",
        "tasks": {"suites": ["workspace"], "tiers": [1]},
        "episode": {"max_context_tokens": 768},
        "eval": {"max_new_tokens": 64},
        "rl": {"temperature": 1.0, "max_new_tokens": 64, "prompts_per_step": 4, "group_size": 4},
        "train": {
            "steps": 2,
            "seed": seed,
            "threads": 1,
            "optim": {"lr": lr},
            "checkpoint": {"every": 1000, "keep_last": 1},
        },
    }
)
summary = run_agent(cfg)


def rate(results: dict) -> float:
    success = results["workspace"]["success"]
    return sum(success.values()) / len(success)


history = [r for r in read_metrics(root / "ablation" / "metrics.jsonl") if "loss" in r]
out = {
    "lr": lr,
    "sampling": "with replacement" if replace else "epoch (distinct)",
    "seed": seed,
    "after_sft": rate(summary["before"]),
    "after_rl": rate(summary["after"]),
    "history": [
        {k: h.get(k) for k in ("reward_mean", "groups_kept", "logprob_mismatch", "grad_norm")} for h in history
    ],
}
print("ABLATION", json.dumps(out))
