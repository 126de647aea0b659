"""GRPO with the rollout engine and the reward workers as Ray actors (a local Ray, 2 CPUs).

The same config and seed give the same samples, rewards and loss as the in-process path
(one engine replica: its seed stream is the in-process engine's; loss and gradient norm agree
within 1e-6 / 1e-5 relative, the float difference of thread counts). A reward worker killed mid-step is replaced, its
completions are scored again, and no sample is lost or turned into a verifier error.
"""

import json

import pytest
import yaml

pytest.importorskip("ray")
import ray

from tempering.config import GRPOConfig, load_config
from tempering.recipes.grpo import run_grpo
from tempering.rollout.store import read_trajectories
from tempering.scale.reward_workers import RayRewardWorkers
from tests.conftest import tiny_llama


@pytest.fixture()
def grpo_cfg(tmp_path, smol_tokenizer):
    model = tmp_path / "tiny"
    tiny = tiny_llama(vocab=49152, seed=5)
    tiny.config.eos_token_id = smol_tokenizer.eos_token_id
    tiny.save_pretrained(model)
    smol_tokenizer.save_pretrained(model)
    cfg = {
        "model": str(model),
        "lora": None,
        "heldout": None,
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 16},
        # a reward the random tiny model earns about every third sample: two capitals in a row
        "reward": [
            {"name": "correct", "weight": 1.0, "verifier": {"type": "numeric"}},
            {"name": "caps", "weight": 0.5, "verifier": {"type": "regex", "pattern": "[A-Z]{2}", "on": "completion"}},
        ],
        "grpo": {
            "prompts_per_step": 4,
            "group_size": 4,
            "max_new_tokens": 8,
            "generation_chunks": 2,
            "dynamic_sampling": False,
            "truncation": "keep",
        },
        "train": {"steps": 1, "precision": "fp32", "optim": {"lr": 1e-3}},
        "out": str(tmp_path / "runs"),
    }
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def step_record(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("step") == 1 and "loss" in r][0]


def test_ray_actors_give_the_in_process_rewards_and_loss_and_survive_a_killed_worker(grpo_cfg, monkeypatch):
    local = run_grpo(load_config(GRPOConfig, grpo_cfg, [], {"name": "local"}))

    workers = []
    submit = RayRewardWorkers.submit

    def submit_then_kill(self, task, completion):  # kill worker 0 after the 5th completion went out
        workers.append(self) if not workers else None
        future = submit(self, task, completion)
        self.sent = getattr(self, "sent", 0) + 1
        if self.sent == 5:
            ray.kill(self.actors[0])
        return future

    monkeypatch.setattr(RayRewardWorkers, "submit", submit_then_kill)
    scale = {"reward_workers": 2, "engine_replicas": 1, "num_cpus": 2}
    remote = run_grpo(load_config(GRPOConfig, grpo_cfg, [f"scale={json.dumps(scale)}"], {"name": "ray"}))

    assert workers[0].replaced == 1 and workers[0].retried >= 1  # slot 0 took completions 7, 9, ... after the kill
    runs = grpo_cfg.parent / "runs"
    a, b = step_record(runs / "local"), step_record(runs / "ray")
    rows_a, rows_b = read_trajectories(runs / "local"), read_trajectories(runs / "ray")
    assert len(rows_a) == len(rows_b) == 16  # no sample lost
    assert [(r["task_id"], r["completion"], r["reward"]) for r in rows_a] == [
        (r["task_id"], r["completion"], r["reward"]) for r in rows_b
    ]
    assert not any("verifier_error" in r["flags"] for r in rows_b)
    assert len({r["reward"] for r in rows_a}) > 1  # rewards vary, so equality is not trivial
    assert a["reward_mean"] == b["reward_mean"] and a["completions"] == b["completions"] == 16
    # equal-length samples make the token-mean loss ~0 at ratio 1; the gradient is what moves
    assert b["loss"] == pytest.approx(a["loss"], abs=1e-6)
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5) and a["grad_norm"] > 1e-3
    assert b["sync_mb"] > 0 and b["sync_s"] > 0  # the weights reached the replica, checksummed
    assert remote["steps"] == local["steps"] == 1
