"""Policy versions: the staleness arithmetic by hand, versions laid out in GRPO batches, kept by
the trajectory store (old stores read as unknown), and stamped by the samplers."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tempering.config import GRPOSettings
from tempering.config.distill import OnPolicySettings
from tempering.rollout.distill_source import OnPolicyDistillSource
from tempering.rollout.engine import HFEngine
from tempering.rollout.grpo_batches import GroupRows, grpo_tensors
from tempering.rollout.source import RolloutSource
from tempering.rollout.store import SCHEMA, TrajectoryRow, TrajectoryStore, read_trajectories
from tempering.types import Reward, Task, Trajectory
from tempering.versions import NOT_SAMPLED, VersionClock, histogram, staleness, staleness_metrics, stamp
from tests.conftest import tiny_llama


def test_staleness_by_hand():
    assert stamp([0, 0, 1, 1, 0], 3) == [-1, -1, 3, 3, -1]
    # trainer at 5: tokens of versions 3, 3, 5, 4 (prompt tokens -1 skipped) are 2, 2, 0, 1 steps old
    ages = staleness(5, [-1, 3, 3, 5, 4, -1])
    assert ages == [2, 2, 0, 1]
    assert histogram(ages) == {0: 1, 1: 1, 2: 2}
    assert staleness_metrics({0: 1, 1: 1, 2: 2}) == {
        "staleness_mean": 1.25,  # (0 + 1 + 2 * 2) / 4
        "staleness_max": 2.0,
        "staleness_hist/0": 1.0,
        "staleness_hist/1": 1.0,
        "staleness_hist/2": 2.0,
    }
    assert staleness_metrics({}) == {}  # no sampled token trained on: nothing to report


def test_a_token_newer_than_the_trainer_or_a_negative_version_is_a_bug():
    with pytest.raises(ValueError, match="newer than the trainer"):
        staleness(2, [3])
    with pytest.raises(ValueError, match=">= 0"):
        stamp([1], -1)


def test_the_clock_reports_the_tokens_served_since_it_was_last_asked():
    clock = VersionClock()
    clock.served([0, 0, NOT_SAMPLED])
    clock.on_weights(2, step=2)
    clock.served([0, 1, 2])  # served at version 2: ages 2, 1, 0
    assert clock.metrics() == {
        "staleness_mean": 0.6,  # (0 + 0 + 2 + 1 + 0) / 5
        "staleness_max": 2.0,
        "staleness_hist/0": 3.0,
        "staleness_hist/1": 1.0,
        "staleness_hist/2": 1.0,
    }
    assert clock.metrics() == {} and (clock.version, clock.step) == (2, 2)


def _traj(prompt, completion, versions=None, loss_mask=None):
    ids = prompt + completion
    return Trajectory(
        task_id="t",
        messages=[],
        token_ids=ids,
        loss_mask=loss_mask or [0] * len(prompt) + [1] * len(completion),
        logprobs=[0.0] * len(ids),
        prompt_length=len(prompt),
        rewards=[Reward(value=0.0)],
        versions=versions,
    )


def test_grpo_batch_versions_follow_the_completion_tokens():
    # a stamped reply (prompt 2 + 3 tokens, the middle one tool output: not sampled) and an unstamped one
    a = _traj([5, 6], [7, 8, 9], versions=[-1, -1, 4, -1, 4], loss_mask=[0, 0, 1, 0, 1])
    b = _traj([5, 6], [7])
    rows = GroupRows([5, 6], [a, b], [[1, 0, 1], [1]], [[1, 0, 1], [1]], torch.zeros(2))
    batch = grpo_tensors([rows])
    assert batch.versions.tolist() == [[4, -1, 4], [-1, -1, -1]]  # -1: not sampled, padding, unknown
    assert batch.versions.shape == batch.completion_ids.shape and batch.versions.dtype == torch.long


def test_a_trajectory_needs_one_version_per_token():
    with pytest.raises(ValueError, match="versions must have one entry per token"):
        _traj([1], [2, 3], versions=[-1, 0])
    assert _traj([1], [2, 3], versions=[-1, 0, 0]).completion_versions == [0, 0]


def _row(step, versions):
    return TrajectoryRow(
        "r", step, "t", "s", "p", "c", [1, 2, 3], [0.0] * 3, 1.0, {}, [], 0.5, "stop", True, 0, versions
    )


def test_the_store_keeps_versions_and_reads_a_store_without_them_as_unknown(tmp_path):
    TrajectoryStore(tmp_path, "r").write(1, [_row(1, [7, 7, 7]), _row(1, None)])
    # a step file as written before versions were kept: no `versions` column at all
    old = [{k: v for k, v in _row(2, None).row().items() if k != "versions"}]
    old_schema = pa.schema([f for f in SCHEMA if f.name != "versions"])
    pq.write_table(pa.Table.from_pylist(old, schema=old_schema), tmp_path / "trajectories" / "step-000002.parquet")
    rows = read_trajectories(tmp_path)
    assert [r["versions"] for r in rows] == [[7, 7, 7], None, None]


@pytest.fixture(scope="module")
def engine(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=7)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    return HFEngine(model, smol_tokenizer, precision="fp32")


def _tasks(n):
    return [
        Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": str(i)}, source="t") for i in range(n)
    ]


def test_the_grpo_sampler_stamps_the_weights_it_holds_and_a_synchronous_step_is_never_stale(engine, tmp_path):
    settings = GRPOSettings(prompts_per_step=2, group_size=2, max_new_tokens=4, dynamic_sampling=False)
    store = TrajectoryStore(tmp_path, "r")
    source = RolloutSource(_tasks(4), engine, settings, grad_accum=2, seed=0, store=store, model=engine.model)
    source.on_weights(3, step=3)  # the trainer's weights are version 3 (a resumed run, say)
    micro = [source.next_batch(), source.next_batch()]
    sampled = sum(int(b.sampled_mask.sum()) for b in micro)
    for b in micro:
        assert torch.equal(b.versions, torch.where(b.sampled_mask.bool(), 3, -1))
    stats = source.stats()
    assert (stats["staleness_mean"], stats["staleness_max"], stats["staleness_hist/0"]) == (0.0, 0.0, sampled)
    assert [k for k in stats if k.startswith("staleness_hist/")] == ["staleness_hist/0"]
    assert (stats["stale_dropped_groups"], stats["stale_dropped_share"]) == (0.0, 0.0)
    rows = read_trajectories(tmp_path)
    assert len(rows) == 4 and all(r["versions"] == [3] * len(r["tokens"]) for r in rows)
    source.close()


def test_a_batch_served_again_after_an_update_is_one_step_stale(engine):
    settings = GRPOSettings(prompts_per_step=1, group_size=2, max_new_tokens=4, updates_per_batch=2)
    source = RolloutSource(_tasks(2), engine, settings, grad_accum=1, seed=0, model=engine.model)
    first = source.next_batch()
    tokens = int(first.sampled_mask.sum())
    assert source.stats()["staleness_hist/0"] == tokens
    source.on_weights(1, step=1)  # the first update on it
    again = source.next_batch()  # the same samples, from the weights before that update
    assert torch.equal(again.versions, first.versions)
    stats = source.stats()
    assert (stats["staleness_mean"], stats["staleness_hist/1"]) == (1.0, tokens) and "staleness_hist/0" not in stats
    assert stats["stale_dropped_groups"] == 0.0  # a batch's own repeats are within the bound (K + mu - 1)
    source.close()


def test_on_policy_distillation_stamps_the_students_samples_only(engine):
    settings = OnPolicySettings(
        prompts_per_step=2, samples_per_prompt=2, max_new_tokens=4, student_fraction=0.5, divergence="reverse_kl"
    )
    teacher_engine = engine  # any engine: its replies stand for the teacher's
    source = OnPolicyDistillSource(_tasks(4), engine, settings, None, 1, 0, teacher_engine=teacher_engine)
    source.on_weights(1, step=1)
    student = source.next_batch()  # step 1 of f = 0.5: the student's samples
    assert torch.equal(student.versions, torch.where(student.sampled_mask.bool(), 1, -1))
    assert source.stats()["staleness_mean"] == 0.0
    teacher = source.next_batch()  # the teacher's replies: no policy of ours sampled them
    assert bool((teacher.versions == NOT_SAMPLED).all()) and not any(k.startswith("staleness") for k in source.stats())
    source.close()
