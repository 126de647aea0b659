"""Replay a workspace RL run's stored batches (trajectories.jsonl: ids, loss masks, rewards) from its
SFT'd weights at a given lr, then greedy completion on the 20 held-out workspace tier-1 tasks. Same
data, only the lr differs: separates the update size from the draw of tasks.

    python bench/experiments/agent_rl_replay.py RUN_DIR LR     # RUN_DIR: a `temper agent` workspace tier-1 run
"""

import json
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from tempering.agents.config import AgentEvalSettings, AgentRLSettings
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings, agent_rollout
from tempering.agents.suites import load_agent_suite
from tempering.agents.tasks import select
from tempering.batches import GRPOBatch
from tempering.config import EngineSettings, LoraSettings, TrainSettings
from tempering.data.padding import PAD_ID, left_pad, right_pad
from tempering.models.load import load_tokenizer
from tempering.models.lora import load_for_training
from tempering.objectives.grpo import GRPOObjective
from tempering.objectives.grpo_math import grpo_advantages
from tempering.rollout.select import build_engine
from tempering.sandbox import SandboxPool
from tempering.train.trainer import Trainer


def batches(rows: list[dict], group: int) -> list[GRPOBatch]:
    out = []
    for r in sorted({row["rollout"] for row in rows}):
        eps = [row for row in rows if row["rollout"] == r]
        groups = [eps[i : i + group] for i in range(0, len(eps), group)]
        groups = [g for g in groups if len({sum(e["rewards"]) for e in g}) > 1]  # tied groups dropped
        plen = [g[0]["loss_mask"].index(1) for g in groups]
        prompt_ids, prompt_mask = left_pad([g[0]["token_ids"][:p] for g, p in zip(groups, plen)], PAD_ID)
        comps = [(e["token_ids"][p:], e["loss_mask"][p:]) for g, p in zip(groups, plen) for e in g]
        ids, cmask = right_pad([c for c, _ in comps], PAD_ID)
        lmask, _ = right_pad([m for _, m in comps], 0)
        width = ids.shape[1]
        rewards = torch.tensor([[sum(e["rewards"]) for e in g] for g in groups])
        out.append(
            GRPOBatch(
                prompt_ids=prompt_ids,
                prompt_mask=prompt_mask,
                completion_ids=ids,
                completion_mask=cmask,
                loss_mask=lmask,
                sampled_mask=lmask,
                engine_logprobs=torch.zeros(len(comps), width),
                advantages=grpo_advantages(rewards).reshape(-1),
                n_real_tokens=int(cmask.sum() + prompt_mask.sum()),
            )
        )
    return out


class Replay:
    def __init__(self, items: list[GRPOBatch]):
        self.items = items

    def next_batch(self) -> GRPOBatch:
        return self.items.pop(0)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def stats(self) -> dict:
        return {}


def main() -> None:
    run, lr = Path(sys.argv[1]), float(sys.argv[2])
    rows = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    m = "smollm2-135m-instruct"
    tok = load_tokenizer(m)
    renderer = AgentRenderer(tok)
    model = load_for_training(m, LoraSettings(r=16, alpha=32, dropout=0.0, last_layers=12))
    model.load_state_dict(load_file(run / "checkpoints/step-00000000/weights.safetensors"), strict=False)
    items = batches(rows, 4)
    rl = AgentRLSettings(temperature=1.0, max_new_tokens=64, prompts_per_step=4, group_size=4)
    ts = TrainSettings(
        steps=len(items), seed=0, threads=1, optim={"lr": lr}, checkpoint={"every": 1000, "keep_last": 1}
    )
    Trainer(model, GRPOObjective(rl), Replay(items), ts, Path(tempfile.mkdtemp())).fit()
    held = select(load_agent_suite("workspace"), "heldout", [1])
    sandbox = SandboxPool(size=4)
    b = agent_rollout(
        held,
        build_engine(EngineSettings.model_validate({"kind": "hf"}), model, tok, "auto"),
        renderer,
        sandbox,
        AgentEvalSettings(max_new_tokens=64),
        EpisodeSettings(max_context_tokens=768),
        n=1,
        seed=0,
    )
    sandbox.close()
    ok = [g[0].stats.success for g in b.groups]
    print("REPLAY", json.dumps({"run": str(run), "lr": lr, "steps": ts.steps, "after_rl": sum(ok) / len(ok)}))


if __name__ == "__main__":
    main()
