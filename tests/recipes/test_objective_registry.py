"""The objective registry: a registered objective is a `temper` command and a pipeline stage with no
further edit (a toy KTO plug-in of three files proves it); every training recipe runs the one
sequence, so `temper rm` refuses a private eval suite like sft and dpo; the reward-model batches
resume exactly and shard under torchrun on the shared epoch walk."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from tests.conftest import tiny_llama

ROOT = Path(__file__).resolve().parents[2]


def test_kto_loss_matches_hand_computed_values():
    """r = 0.1 * (-3 - -5) = 0.2: desirable 1 - sigmoid(0.2) = 0.450166, undesirable 1 - sigmoid(-0.2)
    = 0.549834; at the reference (r = 0) both are 0.5."""
    from tests.fixtures.kto_toy.objective import kto_losses

    losses = kto_losses(
        torch.tensor([-3.0, -3.0, -5.0, -5.0]),
        torch.tensor([-5.0, -5.0, -5.0, -5.0]),
        torch.tensor([True, False, True, False]),
        beta=0.1,
    )
    assert losses.tolist() == pytest.approx([0.450166, 0.549834, 0.5, 0.5], abs=1e-6)


@pytest.fixture()
def tiny_dir(tmp_path, smol_tokenizer):
    path = tmp_path / "tiny"
    tiny_llama(vocab=len(smol_tokenizer), tie=True).save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return str(path)


def conversation(q, a):
    return {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}


def kto_keys(tmp_path, model):
    good = tmp_path / "good.jsonl"
    bad = tmp_path / "bad.jsonl"
    good.write_text("".join(json.dumps(conversation(f"{i}+1?", str(i + 1))) + "\n" for i in range(6)))
    bad.write_text("".join(json.dumps(conversation(f"{i}+1?", "no")) + "\n" for i in range(6)))
    return {
        "model": model,
        "lora": None,
        "data": {"desirable": [str(good)], "undesirable": [str(bad)], "max_length": 64},
        "train": {"steps": 2, "batch_size": 4, "precision": "fp32", "optim": {"lr": 1e-3, "warmup_steps": 0}},
    }


def test_a_registered_plugin_is_a_temper_command_that_trains(tmp_path, tiny_dir):
    """`TEMPERING_PLUGINS` names the toy package; `temper kto` then exists and runs two steps."""
    cfg = tmp_path / "kto.yaml"
    cfg.write_text(yaml.safe_dump({**kto_keys(tmp_path, tiny_dir), "out": str(tmp_path / "runs")}))
    env = {**os.environ, "TEMPERING_PLUGINS": "tests.fixtures.kto_toy", "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    cmd = [sys.executable, "-m", "tempering.cli", "kto", str(cfg), "--name", "toy"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 and summary["data"] == {"desirable": 6, "undesirable": 6}
    # at the reference every example's loss is 0.5: the first step's loss is exactly that
    assert summary["train_loss_first"] == pytest.approx(0.5, abs=1e-4)
    assert (tmp_path / "runs" / "toy" / "final").is_dir()


def test_a_registered_plugin_is_a_pipeline_stage(tmp_path, tiny_dir):
    import tests.fixtures.kto_toy  # noqa: F401  (registers `kto`)
    from tempering.cli import app
    from tempering.pipeline.stages import stage_kinds

    assert stage_kinds()["kto"].resumable
    pipeline = tmp_path / "p.yaml"
    stages = {"toy": {"kind": "kto", **kto_keys(tmp_path, tiny_dir)}}
    pipeline.write_text(yaml.safe_dump({"out": str(tmp_path / "runs"), "stages": stages}))
    result = CliRunner().invoke(app, ["run", str(pipeline)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    from tempering.runs.registry import Registry

    with Registry(tmp_path / "runs" / "registry.sqlite") as reg:
        runs = reg.list(limit=10)
    toy = [r for r in runs if r["kind"] == "kto"]
    assert len(toy) == 1 and toy[0]["status"] == "finished", runs


def test_every_builtin_objective_is_a_command_and_a_stage():
    from tempering.cli.train import command_name, commands
    from tempering.pipeline.stages import stage_kinds
    from tempering.recipes.registry import OBJECTIVES

    assert {"sft", "grpo", "agent", "dpo", "rm", "distill", "vision_sft"} <= set(OBJECTIVES)
    assert {command_name(name) for name in OBJECTIVES} <= set(commands()) and set(OBJECTIVES) <= set(stage_kinds())
    assert "vision-sft" in commands()
    assert "best-of-n" in stage_kinds()


def test_registering_a_second_objective_under_a_taken_name_fails():
    from tempering.recipes.registry import OBJECTIVES, Registration, register

    taken = OBJECTIVES["sft"]
    with pytest.raises(ValueError, match="already registered"):
        register(Registration("sft", taken.config, lambda cfg, force=False: {}, "x", "x"))


def test_rm_refuses_a_planted_private_task_before_recording_a_run(tmp_path, monkeypatch):
    from tempering.config import RMConfig
    from tempering.evals.leakage import PrivateSuiteOverlap
    from tempering.recipes.rm import run_rm
    from tests.evals.conftest import write_jsonl, write_suite
    from tests.evals.test_leakage import CLEAN, EVAL

    suites = tmp_path / "suites"
    suites.mkdir()
    write_suite(suites, "holdout", write_jsonl(suites / "holdout.jsonl", EVAL), private=True)
    monkeypatch.setenv("TEMPERING_SUITES", str(suites))
    rows = [{"prompt": r["prompt"], "chosen": "yes", "rejected": "no"} for r in CLEAN]
    rows.insert(3, {"prompt": "Please answer. " + EVAL[12]["prompt"] + " ?", "chosen": "a", "rejected": "b"})
    pairs = write_jsonl(tmp_path / "pairs.jsonl", rows)
    cfg = RMConfig.model_validate(
        {"data": {"train": [str(pairs)]}, "train": {"steps": 1}, "out": str(tmp_path / "runs")}
    )
    with pytest.raises(PrivateSuiteOverlap, match="holdout"):
        run_rm(cfg)
    assert not (tmp_path / "runs").exists()


def scored(n):
    from tempering.recipes.rm import ScoredPair

    return [ScoredPair(prompt=[1, 2, i], chosen=[3, i], rejected=[4, i, 5]) for i in range(n)]


def test_reward_pair_batches_resume_exactly_and_refuse_other_pairs():
    from tempering.recipes.rm import RewardPairBatches

    pairs = scored(10)
    straight = RewardPairBatches(pairs, 4, pad_id=0, seed=3)
    expected = [straight.next_batch()["prompt_ids"].tolist() for _ in range(6)]
    first = RewardPairBatches(pairs, 4, pad_id=0, seed=3)
    got = [first.next_batch()["prompt_ids"].tolist() for _ in range(2)]
    state = first.state_dict()
    resumed = RewardPairBatches(pairs, 4, pad_id=0, seed=3)
    resumed.load_state_dict(state)
    got += [resumed.next_batch()["prompt_ids"].tolist() for _ in range(4)]
    assert got == expected
    other = RewardPairBatches(scored(9) + scored(1), 4, pad_id=0, seed=3)
    with pytest.raises(ValueError, match="reward-model pairs changed since the checkpoint"):
        other.load_state_dict(state)


def test_reward_pair_batches_split_each_global_batch_between_ranks():
    from tempering.recipes.rm import RewardPairBatches

    pairs = scored(10)
    whole = RewardPairBatches(pairs, 4, pad_id=0, seed=3).next_batch()
    ranks = [RewardPairBatches(pairs, 4, pad_id=0, seed=3, shard=(r, 2)).next_batch() for r in (0, 1)]
    rows = {tuple(r) for r in whole["prompt_ids"].tolist()}
    assert {tuple(r) for b in ranks for r in b["prompt_ids"].tolist()} == rows
    assert all(len(b["prompt_ids"]) == 2 for b in ranks)
    with pytest.raises(ValueError, match="multiple of the 3 processes"):
        RewardPairBatches(pairs, 4, pad_id=0, seed=3, shard=(0, 3))


def test_best_of_n_stage_takes_the_command_settings_and_a_reward_model():
    from pydantic import ValidationError

    from tempering.pipeline.stages import stage_kinds

    kind = stage_kinds()["best-of-n"]
    cfg = kind.config.model_validate(
        {"reward_model": "runs/rm/final", "n": 4, "tasks": {"source": "builtin:arithmetic"}}
    )
    assert (cfg.n, cfg.reward_model, kind.outputs) == (4, "runs/rm/final", ("records",))
    with pytest.raises(ValidationError):
        kind.config.model_validate({"n": 4})  # no reward model
