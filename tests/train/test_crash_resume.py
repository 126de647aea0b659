"""Crash at any step, lose nothing: a trainer killed at a random step and resumed consumes the
same data in the same order as an unbroken run (no id skipped, none drawn twice) and ends on the
same weights, bit for bit (every run here is deterministic on CPU).

The kill step is drawn from a seeded RNG and named in the test id, so a failure names the step
to reproduce it with; set TEMPERING_CRASH_SEED to draw other steps. The record compared is the
run's own `consumed.jsonl` (train/consumed.py).
"""

import copy
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from typer.testing import CliRunner

from tempering.cli import app
from tempering.config import GRPOSettings, TrainSettings
from tempering.data.builtin import arithmetic_conversations
from tempering.objectives.grpo import GRPOObjective
from tempering.rollout.engine import HFEngine
from tempering.rollout.source import RolloutSource
from tempering.train.trainer import Trainer
from tempering.types import Task
from tests.conftest import tiny_llama
from tests.recipes.test_dpo_e2e import write_pairs

SEED = int(os.environ.get("TEMPERING_CRASH_SEED", "20261202"))


def kill_step(kind: str, lo: int, hi: int, odd: bool = False) -> int:
    """The step (lines of consumed.jsonl) at which `kind`'s trainer is killed: seeded, in [lo, hi]."""
    steps = [s for s in range(lo, hi + 1) if not odd or s % 2]
    return random.Random(f"{SEED}-{kind}").choice(steps)


def read_consumed(path: Path) -> list[dict]:
    """The run's consumed.jsonl (read here, not through the module that writes it)."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def sft_config(tmp: Path, model: str) -> dict:
    data = {"train": write_jsonl(tmp / "train.jsonl", arithmetic_conversations(24, 1)), "max_length": 160}
    train = {"steps": 10, "batch_size": 4, "threads": 1, "optim": {"lr": 3e-3}, "checkpoint": {"every": 3}}
    return {"model": model, "lora": None, "data": data, "train": train}


def dpo_config(tmp: Path, model: str) -> dict:
    data = {"train": write_pairs(tmp / "pairs.jsonl", 20, 0), "max_length": 96}
    train = {"steps": 10, "batch_size": 4, "threads": 1, "optim": {"lr": 3e-3}, "checkpoint": {"every": 3}}
    return {"model": model, "lora": None, "data": data, "dpo": {"beta": 0.5}, "train": train}


def grpo_config(tmp: Path, model: str) -> dict:
    # each rollout batch serves two updates: a kill between them must not lose the second
    grpo = {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "max_refills": 1, "updates_per_batch": 2}
    grpo["truncation"] = "keep"  # the random model never stops: a reward that varies, so the weights move
    return {
        "model": model,
        "lora": {"r": 4, "alpha": 8, "last_layers": 1},
        "tasks": {"source": "builtin:arithmetic", "ops": "+", "n": 5},
        "reward": [
            {"name": "digit", "weight": 1.0, "verifier": {"type": "regex", "pattern": "[A-Z]", "on": "completion"}}
        ],
        "grpo": grpo,
        "train": {"steps": 6, "threads": 1, "optim": {"lr": 1e-2}, "checkpoint": {"every": 1}},
    }


CASES = {
    "sft": (sft_config, kill_step("sft", 2, 8)),
    "dpo": (dpo_config, kill_step("dpo", 2, 8)),
    # an odd step: in the middle of a rollout batch served twice
    "grpo": (grpo_config, kill_step("grpo", 3, 5, odd=True)),
}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    path = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=len(smol_tokenizer), tie=True, seed=5)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


def run_to_end(kind: str, cfg: Path, name: str) -> dict:
    res = CliRunner().invoke(app, [kind, str(cfg), "--name", name])
    assert res.exit_code == 0, res.output + repr(res.exception)
    return json.loads((cfg.parent / "runs" / name / "summary.json").read_text())


def run_and_kill(kind: str, cfg: Path, name: str, step: int) -> None:
    """`temper KIND` in its own process, SIGKILLed once it has drawn the data of `step`."""
    record = cfg.parent / "runs" / name / "consumed.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tempering.cli", kind, str(cfg), "--name", name],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if record.exists() and len(read_consumed(record)) >= step:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)  # a no-op if it already exited (the assertion below says so)
    assert proc.wait() == -signal.SIGKILL, f"{kind} finished before step {step}: not killed mid-run"


def final_weights(run: Path) -> dict[str, torch.Tensor]:
    files = sorted((run / "final").glob("*.safetensors"))
    assert files, f"no weights in {run / 'final'}"
    return {f"{f.name}:{k}": v for f in files for k, v in load_file(f).items()}


def assert_no_skip_or_repeat(ids: list, universe: list) -> None:
    """Drawn ids walk whole passes over the data: each pass draws every id once, the last a prefix's worth."""
    n = len(universe)
    for start in range(0, len(ids), n):
        chunk = ids[start : start + n]
        assert len(set(chunk)) == len(chunk) and set(chunk) <= set(universe), chunk


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind,make,step", [pytest.param(k, m, s, id=f"{k}-killed-at-step-{s}-seed-{SEED}") for k, (m, s) in CASES.items()]
)
def test_trainer_killed_at_a_random_step_resumes_exactly(tmp_path, tiny_dir, monkeypatch, kind, make, step):
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))  # the DPO reference cache, shared by both runs
    cfg = tmp_path / f"{kind}.yaml"
    cfg.write_text(yaml.safe_dump({**make(tmp_path, tiny_dir), "out": str(tmp_path / "runs")}))
    run_to_end(kind, cfg, "straight")
    run_and_kill(kind, cfg, "killed", step)
    resumed = run_to_end(kind, cfg, "killed")
    assert resumed["resumed_from"] is not None and resumed["resumed_from"] < step

    straight = read_consumed(tmp_path / "runs" / "straight" / "consumed.jsonl")
    again = read_consumed(tmp_path / "runs" / "killed" / "consumed.jsonl")
    assert [r["step"] for r in again] == list(range(1, resumed["steps"] + 1))
    assert again == straight  # the same ids, step by step, in the same order
    drawn = [i for r in again for i in r["ids"]]
    universe = sorted(set(drawn)) if kind == "grpo" else list(range(max(drawn) + 1))
    assert_no_skip_or_repeat(drawn, universe)
    a, b = final_weights(tmp_path / "runs" / "straight"), final_weights(tmp_path / "runs" / "killed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- GRPO sampling ahead: the batch in flight at the kill ----------------------------------


class Killed(Exception):
    """Raised from a Trainer callback right after step k's checkpoint: the process state a SIGKILL
    at that moment leaves on disk, with the next batch still sampling in the background."""


def grpo_trainer(run_dir: Path, tokenizer, mode: str, kill_at: int | None = None) -> Trainer:
    """Five GRPO steps in this process; `mode` "ahead" / "ahead2": sampling one / two batches ahead,
    "twice": each batch serves two updates."""
    model = tiny_llama(vocab=49152, seed=7)
    model.config.eos_token_id = tokenizer.eos_token_id
    # an engine with its own copy of the weights (as scale/'s replicas have): sync_weights copies into it
    engine = HFEngine(copy.deepcopy(model), tokenizer, precision="fp32")
    tasks = [
        Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "regex", "pattern": "[A-Z]", "on": "completion"})
        for i in range(7)
    ]
    # dynamic sampling: how many prompts a batch draws depends on its samples' rewards
    grpo = GRPOSettings(
        prompts_per_step=2,
        group_size=2,
        max_new_tokens=4,
        max_refills=1,
        dynamic_sampling=True,
        truncation="keep",  # the random model never stops: a reward that varies, so the weights move
        max_off_policy_steps={"ahead": 1, "ahead2": 2}.get(mode, 0),
        updates_per_batch=2 if mode == "twice" else 1,
    )
    source = RolloutSource(tasks, engine, grpo, grad_accum=1, seed=3, model=model, precision="fp32")
    train = TrainSettings.model_validate(
        {"steps": 5, "precision": "fp32", "threads": 1, "optim": {"lr": 5e-2}, "checkpoint": {"every": 1}}
    )

    def kill(step: int, record: dict) -> None:
        if step == kill_at:
            raise Killed

    return Trainer(model, GRPOObjective(grpo), source, train, run_dir, callbacks=[kill])


@pytest.mark.parametrize(
    "mode,step",
    [
        pytest.param("ahead", s := kill_step("grpo-ahead", 1, 4), id=f"ahead-killed-at-step-{s}-seed-{SEED}"),
        pytest.param("ahead2", s := kill_step("grpo-ahead2", 1, 4), id=f"ahead2-killed-at-step-{s}-seed-{SEED}"),
        pytest.param("twice", s := kill_step("grpo-twice", 1, 4, odd=True), id=f"twice-killed-at-step-{s}-seed-{SEED}"),
    ],
)
def test_grpo_batch_in_flight_at_a_kill_is_neither_lost_nor_redrawn(tmp_path, smol_tokenizer, mode, step):
    """Modes "ahead", "ahead2": the batches sampling in the background at the kill came from weights
    before the last update; a resume that sampled it again from the resumed weights would train on other
    samples. Mode "twice": a kill between a batch's two updates; a resume that went on to the next
    batch would skip the second update."""
    straight = grpo_trainer(tmp_path / "straight", smol_tokenizer, mode)
    try:
        straight.fit()
    finally:
        straight.batches.close()
    killed = grpo_trainer(tmp_path / "killed", smol_tokenizer, mode, kill_at=step)
    with pytest.raises(Killed):
        killed.fit()
    killed.batches.close()
    resumed = grpo_trainer(tmp_path / "killed", smol_tokenizer, mode)
    try:
        resumed_from = resumed.fit().resumed_from
    finally:
        resumed.batches.close()
    for (name, p), (_, q) in zip(straight.named, resumed.named):
        assert torch.equal(p, q), name
    # "twice": the checkpoint due at an odd step waits for the batch's second update
    assert resumed_from == (step if mode.startswith("ahead") else step - 1)
    a = read_consumed(tmp_path / "straight" / "consumed.jsonl")
    b = read_consumed(tmp_path / "killed" / "consumed.jsonl")
    assert a == b and [r["step"] for r in b] == [1, 2, 3, 4, 5]
    assert_no_skip_or_repeat([i for r in b for i in r["ids"]], [f"t{i}" for i in range(7)])
