"""Diagnosis of workspace RL after SFT: from one run's SFT'd LoRA weights, 2 GRPO steps (4 tasks x 4
episodes) at a given lr, tasks drawn from the tier as now (an epoch) or with replacement (as before),
then greedy completion on the 20 held-out workspace tier-1 tasks. Prints one ABLATION json line.

    python bench/experiments/agent_rl_ablation.py WEIGHTS.safetensors LR {distinct,replace} SEED
    # WEIGHTS: runs/NAME/checkpoints/step-00000000/weights.safetensors of a workspace tier-1 `temper agent` run
    # SKIP_BEFORE=1: skip the eval before RL (it is that run's after_sft)
"""

import json
import os
import sys
import tempfile
from pathlib import Path

from safetensors.torch import load_file

from tempering.agents import training as T
from tempering.agents.config import AgentEvalSettings, AgentRLSettings
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings, agent_rollout
from tempering.agents.tasks import load_agent_suite, select
from tempering.config import LoraSettings, TrainSettings
from tempering.models.load import load_tokenizer
from tempering.models.lora import load_for_training
from tempering.objectives.grpo import GRPOObjective
from tempering.rollout.engine import HFEngine
from tempering.sandbox import SandboxPool
from tempering.train.trainer import Trainer

weights, lr, replace, seed = sys.argv[1], float(sys.argv[2]), sys.argv[3] == "replace", int(sys.argv[4])
if replace:

    def sample(self, n):
        pool = self.by_tier[self.tier]
        return [pool[self.rng.randrange(len(pool))] for _ in range(n)]

    T.Curriculum.sample = sample
m = "smollm2-135m-instruct"
tok = load_tokenizer(m)
r = AgentRenderer(tok)
model = load_for_training(m, LoraSettings(r=16, alpha=32, dropout=0.0, last_layers=12))
model.load_state_dict(load_file(weights), strict=False)
eng = HFEngine(model, tok, precision="auto")
held = select(load_agent_suite("workspace"), "heldout", [1])
train = select(load_agent_suite("workspace"), "train", [1])
sb = SandboxPool(size=4)
ep = EpisodeSettings(max_context_tokens=768)


def ev():
    b = agent_rollout(held, eng, r, sb, AgentEvalSettings(max_new_tokens=64), ep, n=1, seed=0)
    return {g[0].task.id: g[0].stats.success for g in b.groups}


before = {} if os.environ.get("SKIP_BEFORE") else ev()
rl = AgentRLSettings(temperature=1.0, max_new_tokens=64, prompts_per_step=4, group_size=4)
src = T.AgentRolloutSource(train, eng, r, sb, rl, ep, 1, seed)
ts = TrainSettings(steps=2, seed=seed, threads=1, optim={"lr": lr}, checkpoint={"every": 1000, "keep_last": 1})
res = Trainer(model, GRPOObjective(rl), src, ts, Path(tempfile.mkdtemp())).fit()
after = ev()
out = {
    "lr": lr,
    "sampling": "with replacement" if replace else "epoch (distinct)",
    "seed": seed,
    "after_sft": sum(before.values()) / len(before) if before else None,
    "after_rl": sum(after.values()) / len(after),
    "history": [
        {k: h.get(k) for k in ("reward_mean", "groups_kept", "logprob_mismatch", "grad_norm")} for h in res.history
    ],
}
print("ABLATION", json.dumps(out))
sb.close()
