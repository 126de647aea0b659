"""Partial rollouts (`rollout/partial.py`): a generation in segments, the engine free to take newer
weights between them; each token keeps the version that sampled it and that version's log-prob."""

import copy
import threading

import pytest
import torch

from tempering.config import ConfigError, GRPOConfig, GRPOSettings, SamplingParams, load_config
from tempering.data.padding import PAD_ID, left_pad, right_pad
from tempering.rollout.engine import HFEngine
from tempering.rollout.partial import SegmentedEngine
from tempering.rollout.replay import FP32_EPSILON, trainer_logprobs
from tempering.rollout.source import RolloutSource
from tempering.types import Task
from tests.conftest import tiny_llama


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))


def teacher_forced(model, prompts, completions):
    """(N, T) log-probs of each completion's tokens under `model` (the trainer's path, fp32)."""
    prompt_ids, prompt_mask = left_pad([prompts[c.prompt_index] for c in completions], PAD_ID)
    ids, mask = right_pad([c.token_ids for c in completions], PAD_ID)
    return trainer_logprobs(model, prompt_ids, prompt_mask, ids, mask, "fp32", 1.0), mask


def test_a_generation_spanning_a_weight_update_replays_each_token_at_its_own_version(smol_tokenizer):
    trainer = tiny_llama(vocab=49152, seed=7)
    engine = HFEngine(copy.deepcopy(trainer), smol_tokenizer, precision="fp32")  # its own copy, as a replica has
    snapshots = {0: copy.deepcopy(trainer).eval()}

    def newer_weights():  # the trainer publishes version 1 after the first segment; the engine takes it
        if len(snapshots) == 1:
            perturb(trainer, 1)
            snapshots[1] = copy.deepcopy(trainer).eval()
            engine.sync_weights(trainer)
        return len(snapshots) - 1

    prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
    segmented = SegmentedEngine(engine, 4, newer_weights, version=0)
    groups = segmented.generate(prompts, SamplingParams(n=2, max_new_tokens=12, temperature=1.0, seed=3))
    completions = [c for group in groups for c in group]
    assert [c.prompt_index for c in completions] == [0, 0, 1, 1]
    for c in completions:
        assert len(c.token_ids) == len(c.logprobs) == len(c.versions) > 4
        assert c.versions == [0] * 4 + [1] * (len(c.token_ids) - 4)  # both versions in one generation
    versions = torch.tensor([c.versions + [-1] * (12 - len(c.versions)) for c in completions])
    engine_logp, _ = right_pad([c.logprobs for c in completions], 0.0, width=12, dtype=torch.float32)
    gaps = {}
    for v, model in snapshots.items():
        logp, mask = teacher_forced(model, prompts, completions)
        at_v = (versions == v) & mask.bool()
        gaps[v] = float((logp - engine_logp).abs()[at_v].max())
        assert gaps[v] <= FP32_EPSILON, (v, gaps[v])
    # the check can fail: version 0's weights do not give the version-1 tokens their recorded log-probs
    logp0, mask = teacher_forced(snapshots[0], prompts, completions)
    assert float((logp0 - engine_logp).abs()[(versions == 1) & mask.bool()].max()) > 1e-2


def test_without_a_weight_change_segments_stop_where_a_one_shot_generation_stops(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=3)
    engine = HFEngine(model, smol_tokenizer, precision="fp32")
    decode = lambda ids: smol_tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    segmented = SegmentedEngine(engine, 4, lambda: 0, version=0, decode=decode)
    prompts = [[5, 6, 7, 8, 9]]
    greedy = SamplingParams(n=1, max_new_tokens=12, temperature=0.0)
    free = engine.generate(prompts, greedy)[0][0]
    assert len(free.token_ids) == 12
    # a stop token sampled in the second segment, and a stop string spanning the first boundary
    for stop in [
        {"stop_token_ids": [free.token_ids[6]]},
        {"stop": (decode(free.token_ids[3:5]),)},
    ]:
        params = greedy.model_copy(update=stop)
        one_shot, parts = engine.generate(prompts, params)[0][0], segmented.generate(prompts, params)[0][0]
        assert one_shot.finish_reason == parts.finish_reason == "stop"
        assert parts.token_ids == one_shot.token_ids and len(one_shot.token_ids) < 12
        assert parts.text == one_shot.text and parts.logprobs == pytest.approx(one_shot.logprobs, abs=1e-5)
    parts = segmented.generate(prompts, greedy)[0][0]  # no stop: max_new_tokens, as one shot
    assert (parts.token_ids, parts.finish_reason) == (free.token_ids, "length")


def test_a_seeded_segmented_generation_is_reproducible(smol_tokenizer):
    engine = HFEngine(tiny_llama(vocab=49152, seed=3), smol_tokenizer, precision="fp32")
    segmented = SegmentedEngine(engine, 3, lambda: 0, version=0)
    params = SamplingParams(n=3, max_new_tokens=10, temperature=1.0, seed=11)
    first, again = segmented.generate([[5, 6, 7]], params), segmented.generate([[5, 6, 7]], params)
    assert [c.token_ids for c in first[0]] == [c.token_ids for c in again[0]]
    other = segmented.generate([[5, 6, 7]], params.model_copy(update={"seed": 12}))
    assert [c.token_ids for c in first[0]] != [c.token_ids for c in other[0]]


def test_the_rollout_source_continues_a_batch_under_weights_published_mid_generation(smol_tokenizer):
    """K = 1 through the orchestrator: batch 1 starts sampling (pinned to version 0) when the trainer takes
    batch 0; the trainer's update publishes version 1 while batch 1 is between segments, and its later
    segments sample under version 1 (`RolloutSource.newer_weights`, on the sampler thread)."""
    taken, released = threading.Event(), threading.Event()
    first_segments = []

    class Held(HFEngine):
        """Holds batch 1's first segment until the test's trainer has taken batch 0."""

        def generate(self, prompts, params):
            if params.n > 1:  # a batch's (or the sync check's) first segment: group_size samples a prompt
                first_segments.append(params.seed)
                if len(first_segments) > 1:
                    assert taken.wait(60)
            return super().generate(prompts, params)

    trainer = tiny_llama(vocab=49152, seed=7)
    engine = Held(copy.deepcopy(trainer), smol_tokenizer, precision="fp32")
    tasks = [Task(id=f"t{i}", prompt=f"say {i}", verifier={"type": "exact", "answer": str(i)}) for i in range(4)]
    settings = GRPOSettings(
        prompts_per_step=2, group_size=2, max_new_tokens=8, dynamic_sampling=False, generation_chunks=1,
        max_off_policy_steps=1, partial_rollouts=True, segment_tokens=3,
    )  # fmt: skip
    source = RolloutSource(tasks, engine, settings, grad_accum=1, seed=0, model=trainer, precision="fp32")
    publish = source.orchestrator.publish

    def publishing(version):
        publish(version)
        released.set()

    source.orchestrator.publish = publishing  # type: ignore[method-assign]
    newer = source.newer_weights

    def held():  # between two segments of batch 1: wait for the trainer's update to be published
        if taken.is_set():
            assert released.wait(60)
        return newer()

    source.newer_weights = held  # type: ignore[method-assign]
    try:
        first = source.next_batch()
        taken.set()
        assert set(first.versions[first.sampled_mask.bool()].tolist()) == {0}
        perturb(trainer, 2)  # the trainer's update on batch 0 ...
        source.on_weights(1, step=1)  # ... published (and, at step 1, the sync check runs after batch 1)
        batch = source.next_batch()
        sampled = batch.sampled_mask.bool()
        assert set(batch.versions[sampled].tolist()) == {0, 1}
        for row, mask in zip(batch.versions, sampled):
            kept = row[mask].tolist()
            assert kept[:3] == [0] * min(3, len(kept)) and all(v == 1 for v in kept[3:])
        assert source.stats()["sync_check_version"] == 1.0
    finally:
        source.close()


def test_the_in_process_engine_refuses_partial_rollouts(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=3)
    settings = GRPOSettings(max_off_policy_steps=1, partial_rollouts=True)
    tasks = [Task(id="t", prompt="say 1", verifier={"type": "exact", "answer": "1"})]
    # partial rollouts need K > 0, and K > 0 needs an engine with its own copy of the weights
    with pytest.raises(ValueError, match="the engine samples from the trainer's own model"):
        RolloutSource(tasks, HFEngine(model, smol_tokenizer), settings, grad_accum=1, seed=0, model=model)


@pytest.mark.parametrize(
    "grpo, scale, message",
    [
        ("{segment_tokens: 8}", False, "segment_tokens does nothing with partial_rollouts off"),
        ("{partial_rollouts: true}", True, "partial_rollouts does nothing with max_off_policy_steps 0"),
        (
            "{partial_rollouts: true, max_off_policy_steps: 1}",
            False,
            "grpo.partial_rollouts needs an engine that takes a weight sync mid-generation",
        ),
        ("{sync_check_every: 2}", False, "grpo.sync_check_every does nothing with engine kind 'batching'"),
    ],
)
def test_partial_rollout_and_sync_check_keys_that_would_do_nothing_are_one_line_errors(tmp_path, grpo, scale, message):
    path = tmp_path / "g.yaml"
    path.write_text(f"train: {{steps: 1}}\ngrpo: {grpo}\n" + ("scale: {}\n" if scale else ""))
    with pytest.raises(ConfigError) as err:
        load_config(GRPOConfig, path)
    line = str(err.value)
    assert message in line and "\n" not in line.strip()


def test_partial_rollouts_with_engine_replicas_load(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(
        "train: {steps: 1}\nscale: {}\n"
        "grpo: {partial_rollouts: true, segment_tokens: 16, max_off_policy_steps: 1, sync_check_every: 5}\n"
    )
    cfg = load_config(GRPOConfig, path)
    assert (cfg.grpo.partial_rollouts, cfg.grpo.segment_tokens, cfg.grpo.sync_check_every) == (True, 16, 5)
