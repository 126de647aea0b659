"""RolloutSource: dynamic sampling, verifier failures, truncation, advantages, the store, `temper traj`."""

import pytest
import torch
from typer.testing import CliRunner

from tempering.config import GRPOSettings
from tempering.rollout.engine import HFEngine
from tempering.rollout.rollout import VERIFIER_ERROR
from tempering.rollout.source import RolloutSource
from tempering.rollout.store import TrajectoryStore, read_trajectories
from tempering.types import Task
from tempering.verifiers import VERIFIERS, register
from tests.conftest import tiny_llama


@register("test_first_char")
def _first_char(spec, completion, ctx):
    """1 when the completion starts with a character from `chars` (test verifier)."""
    from tempering.types import Reward

    return Reward(value=float(completion[:1] in spec["chars"]))


@register("test_crash")
def _crash(spec, completion, ctx):
    raise RuntimeError("verifier exploded")


@pytest.fixture(scope="module")
def engine(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=7)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    return HFEngine(model, smol_tokenizer, precision="fp32")


def _tasks(n, spec):
    return [Task(id=f"t{i}", prompt=f"question number {i}", verifier=spec, source="test") for i in range(n)]


def _source(engine, tasks, tmp_path, **kw):
    settings = GRPOSettings(**{"prompts_per_step": 4, "group_size": 4, "max_new_tokens": 6, **kw})
    return RolloutSource(
        tasks, engine, settings, grad_accum=2, seed=0, store=TrajectoryStore(tmp_path, "run-x"), model=engine.model
    )


def test_dynamic_sampling_drops_tied_groups_and_records_everything(engine, tmp_path):
    # every letter scores 1: all groups tie -> all dropped, refilled, then used with advantage 0
    src = _source(engine, _tasks(20, {"type": "test_first_char", "chars": ""}), tmp_path, max_refills=2)
    micro = [src.next_batch(), src.next_batch()]
    stats = src.stats()
    assert stats["zero_variance_share"] == 1.0 and stats["groups_generated"] == 12 and stats["groups_kept"] == 4
    assert all(torch.all(b.advantages == 0) for b in micro)
    rows = read_trajectories(tmp_path, step=1)
    assert len(rows) == 12 * 4 and sum(r["kept"] for r in rows) == 16
    assert all(len(r["tokens"]) == len(r["logprobs"]) for r in rows)


def test_micro_batches_hold_whole_groups_with_normalised_advantages(engine, tmp_path):
    chars = "".join(chr(c) for c in range(32, 127) if c % 2)  # about half of first characters score
    src = _source(engine, _tasks(40, {"type": "test_first_char", "chars": chars}), tmp_path, truncation="keep")
    a, b = src.next_batch(), src.next_batch()
    for batch in (a, b):
        groups = batch.prompt_ids.shape[0]
        assert batch.completion_ids.shape[0] == groups * 4 == batch.advantages.shape[0]
        adv = batch.advantages.view(groups, 4)
        assert torch.allclose(adv.mean(dim=1), torch.zeros(groups), atol=1e-5)
        nonzero = adv.abs().sum(dim=1) > 0
        assert torch.allclose(adv[nonzero].std(dim=1, unbiased=False), torch.ones(int(nonzero.sum())), atol=1e-3)
    rows = read_trajectories(tmp_path, step=1)
    kept = [r for r in rows if r["kept"]]
    assert {r["reward"] for r in kept} == {0.0, 1.0}


def test_a_crashing_verifier_drops_the_group_and_is_counted(engine, tmp_path):
    src = _source(engine, _tasks(8, {"type": "test_crash"}), tmp_path, max_refills=0)
    src.next_batch()
    stats = src.stats()
    assert stats["verifier_failed_groups"] == 4 and stats[f"flags/{VERIFIER_ERROR}"] == 16
    assert read_trajectories(tmp_path, order="flagged")[0]["flags"] == [VERIFIER_ERROR]


def test_truncated_samples_are_penalised_or_masked(engine, tmp_path):
    spec = {"type": "test_first_char", "chars": "".join(chr(c) for c in range(32, 127))}
    pen = _source(
        engine,
        _tasks(8, spec),
        tmp_path / "p",
        max_new_tokens=2,
        truncation="penalty",
        truncation_reward=-1.0,
        dynamic_sampling=False,
    )
    pen.next_batch()
    rows = read_trajectories(tmp_path / "p")
    assert all(r["reward"] == -1.0 and "truncated" in r["flags"] for r in rows if r["finish_reason"] == "length")
    masked = _source(
        engine, _tasks(8, spec), tmp_path / "m", max_new_tokens=2, truncation="mask", dynamic_sampling=False
    )
    batch = masked.next_batch()
    truncated = batch.completion_mask.sum(dim=1) == 2  # tiny model never stops within 2 tokens
    assert truncated.any() and torch.all(batch.loss_mask[truncated] == 0)


def test_resume_state_round_trips(engine, tmp_path):
    src = _source(engine, _tasks(8, {"type": "test_first_char", "chars": "a"}), tmp_path, dynamic_sampling=False)
    src.next_batch()
    state = src.state_dict()
    other = _source(engine, _tasks(8, {"type": "test_first_char", "chars": "a"}), tmp_path)
    other.load_state_dict(state)
    assert other.cursor == src.cursor == 4 and other.rollouts == 1


def test_traj_cli_reads_back_worst_and_flagged(engine, tmp_path):
    from tempering.cli import app

    src = _source(engine, _tasks(8, {"type": "test_crash"}), tmp_path, max_refills=0)
    src.next_batch()
    res = CliRunner().invoke(app, ["traj", str(tmp_path), "--flagged", "--json", "--limit", "3"])
    assert res.exit_code == 0, res.output
    assert len(res.output.strip().splitlines()) == 3 and VERIFIER_ERROR in res.output
    res = CliRunner().invoke(app, ["traj", str(tmp_path), "--step", "9"])
    assert res.exit_code == 2 and "no trajectories for step 9" in " ".join(res.output.split())


def teardown_module():
    for name in ("test_first_char", "test_crash"):
        VERIFIERS.pop(name, None)


def test_overlong_shaping_takes_reward_from_replies_near_the_limit(engine, tmp_path):
    # every reply scores 0; with max_new_tokens 6 and a buffer of 3, replies of 4-6 tokens lose 1/3 per token
    from tempering.objectives.advantages import overlong_penalty

    spec = {"type": "test_first_char", "chars": ""}
    src = _source(engine, _tasks(8, spec), tmp_path, truncation="keep", dynamic_sampling=False, overlong_buffer=3)
    src.next_batch()
    rows = read_trajectories(tmp_path, step=1)
    assert [r["reward"] for r in rows] == pytest.approx([overlong_penalty(len(r["tokens"]), 6, 3) for r in rows])
    assert min(r["reward"] for r in rows) < 0  # some reply reached the buffer (the tiny model rarely stops early)
