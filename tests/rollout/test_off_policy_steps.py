"""`grpo.max_off_policy_steps` (K, the staleness bound) and `grpo.stale`: the config's refusals, the
retired `rollout_ahead` spelling (and resuming a run recorded with it), which losses may train on
stale samples, and the bound enforced as a micro-batch is handed to the trainer."""

import pytest
import torch
import yaml

from tempering import algorithms
from tempering.algorithms import register_policy_loss
from tempering.config import ConfigError, GRPOConfig, GRPOSettings, load_config
from tempering.errors import UserError
from tempering.rollout.grpo_batches import GroupRows, drop_stale_groups, grpo_tensors
from tempering.rollout.source import RolloutSource
from tempering.runs.stage import config_diff
from tempering.types import Reward, Task, Trajectory

PLUGIN = __name__
UNSAFE = "plain_pg_for_staleness"


def plain_policy_gradient(logp, logp_old, advantages, mask, *, clip_low, clip_high):
    """REINFORCE without a ratio: -A log p. Samples of an older policy would push it unbounded."""
    return -advantages * logp, torch.zeros_like(mask, dtype=torch.bool)


@pytest.fixture()
def unsafe_loss():
    """A plug-in's loss, registered without `stale_safe` for one test (the registry is process-wide)."""
    register_policy_loss(UNSAFE, aggregation="token_mean")(plain_policy_gradient)
    yield UNSAFE
    algorithms.REGISTRY.pop(("policy_loss", UNSAFE))


def _load(tmp_path, grpo):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({"train": {"steps": 1}, "grpo": grpo}))
    return load_config(GRPOConfig, path)


@pytest.mark.parametrize(
    "grpo, words",
    [
        ({"max_off_policy_steps": -1}, "grpo.max_off_policy_steps: Input should be greater than or equal to 0"),
        ({"max_off_policy_steps": 1, "updates_per_batch": 2}, "staleness would add up"),
        ({"rollout_ahead": True}, "grpo.rollout_ahead is now grpo.max_off_policy_steps: 1"),
        ({"rollout_ahead": False}, "grpo.rollout_ahead is now grpo.max_off_policy_steps: 0"),
        ({"stale": "drop"}, "stale does nothing with max_off_policy_steps 0"),
        ({"max_off_policy_steps": 1, "stale": "resample"}, "stale: resample is not supported"),
    ],
)
def test_the_bound_refuses_what_it_cannot_honour_in_one_line(tmp_path, grpo, words):
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, grpo)
    assert "\n" not in str(err.value) and words in str(err.value)


def test_the_bound_defaults_to_synchronous_and_any_bound_loads(tmp_path):
    assert _load(tmp_path, {}).grpo.max_off_policy_steps == 0
    for k in (1, 2, 5):  # K >= 2: the asynchronous orchestrator samples up to K batches ahead
        ahead = _load(tmp_path, {"max_off_policy_steps": k}).grpo
        assert (ahead.max_off_policy_steps, ahead.stale) == (k, "drop")


def _load_top(tmp_path, top):
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump({"train": {"steps": 1}, "grpo": {"max_off_policy_steps": 2}} | top))
    return load_config(GRPOConfig, path)


@pytest.mark.parametrize(
    "top, words",
    [
        ({"sampler": {}, "scale": {}}, "sampler: does nothing with scale: (the Ray replicas are the engine)"),
        ({"sampler": {}, "engine": {"kind": "vllm"}}, "engine.kind 'vllm' does not run in sampler:'s engine process"),
        ({"sampler": {"call_timeout_s": 0}}, "sampler.call_timeout_s: Input should be greater than 0"),
        ({"sampler": {"rope_scaling": {}}}, "sampler.rope_scaling: Extra inputs are not permitted"),
        (
            {"sampler": {}, "rope_scaling": {"type": "linear", "factor": 2.0}},
            "rope_scaling with sampler: is not supported yet",
        ),
    ],
)
def test_the_engine_process_refuses_what_would_do_nothing_in_one_line(tmp_path, top, words):
    with pytest.raises(ConfigError) as err:
        _load_top(tmp_path, top)
    assert "\n" not in str(err.value) and words in str(err.value)


def test_sampling_ahead_needs_an_engine_with_its_own_weights(tmp_path):
    from tempering.recipes.grpo import grpo_guard

    with pytest.raises(UserError) as err:  # refused before anything loads or is recorded
        grpo_guard(_load_top(tmp_path, {}))
    assert "grpo.max_off_policy_steps 2 needs an engine with its own copy of the weights: `sampler: {}`" in str(
        err.value
    )
    assert _load_top(tmp_path, {"sampler": {"threads": 1}}).sampler.threads == 1  # with one: fine


def test_every_registered_loss_is_stale_safe_or_refused_at_one_step(unsafe_loss):
    algorithms.load([PLUGIN])
    safe = algorithms.stale_safe_losses()
    # the built-ins clip the ratio (grpo family, gspo) or cap the importance weight (cispo)
    assert safe == ["bnpo", "cispo", "dapo", "dr_grpo", "grpo", "gspo"]
    for name in algorithms.names("policy_loss"):
        if algorithms.lookup("policy_loss", name).options["stale_safe"]:
            assert GRPOSettings(max_off_policy_steps=1, loss=name, plugins=[PLUGIN]).loss == name
            continue
        with pytest.raises(ValueError) as err:
            GRPOSettings(max_off_policy_steps=1, loss=name, plugins=[PLUGIN])
        assert f"loss {name!r} is not safe for stale samples" in str(err.value)
        assert "(stale-safe losses: bnpo, cispo, dapo, dr_grpo, grpo, gspo)" in str(err.value)
    assert unsafe_loss in algorithms.names("policy_loss")  # one refused name at least
    assert GRPOSettings(loss=unsafe_loss, plugins=[PLUGIN]).max_off_policy_steps == 0  # synchronous: fine


def test_a_plugin_loss_is_judged_when_the_run_starts(request):
    # the plug-in has registered nothing yet: validation cannot know the loss, the run's start does
    settings = GRPOSettings(max_off_policy_steps=1, loss=UNSAFE, plugins=[PLUGIN])
    request.getfixturevalue("unsafe_loss")  # what importing the plug-in registers
    with pytest.raises(UserError, match=f"loss {UNSAFE!r} is not safe for stale samples"):
        settings.load_algorithms()


def test_the_stale_safe_mark_read_from_source_is_the_registered_one():
    algorithms.load()
    for (family, name), a in algorithms.REGISTRY.items():
        if family == "policy_loss" and a.fn.__module__ in algorithms.BUILTIN_MODULES:
            assert algorithms.builtin_options()[(family, name)]["stale_safe"] is a.options["stale_safe"] is True


def test_a_run_recorded_with_rollout_ahead_resumes_under_max_off_policy_steps():
    old_sync = {"grpo": {"rollout_ahead": False, "group_size": 8}}
    old_ahead = {"grpo": {"rollout_ahead": True, "group_size": 8}}
    sync = {"grpo": {"max_off_policy_steps": 0, "stale": "drop", "group_size": 8}}
    ahead = {"grpo": {"max_off_policy_steps": 1, "stale": "drop", "group_size": 8}}
    assert config_diff(old_sync, sync) == [] and config_diff(old_ahead, ahead) == []
    assert config_diff(old_ahead, sync) == ["grpo.max_off_policy_steps: 1 -> 0"]  # still a change


# -- the bound where a micro-batch trains ----------------------------------------------------


def _traj(versions: list[int]) -> Trajectory:
    prompt, completion = [5, 6], list(range(10, 10 + len(versions)))
    return Trajectory(
        task_id="t",
        messages=[],
        token_ids=prompt + completion,
        loss_mask=[0, 0] + [1] * len(completion),
        logprobs=[0.0] * (2 + len(completion)),
        prompt_length=2,
        rewards=[Reward(value=0.0)],
        versions=[-1, -1] + versions,
    )


def _group(prompt: int, versions: list[list[int]], advantages: list[float]) -> GroupRows:
    trajs = [_traj(v) for v in versions]
    masks = [[1] * len(v) for v in versions]
    return GroupRows([prompt, prompt + 1], trajs, masks, masks, torch.tensor(advantages))


def test_an_engine_sampling_from_the_trainers_own_model_cannot_sample_ahead():
    from types import SimpleNamespace

    from tests.conftest import tiny_llama

    model = tiny_llama()
    tasks = [Task(id="t", prompt="p", verifier={"type": "exact", "answer": "1"})]
    settings = GRPOSettings(max_off_policy_steps=1)
    with pytest.raises(
        UserError, match="the engine samples from the trainer's own model, which the trainer updates"
    ):  # the in-process HFEngine's
        RolloutSource(tasks, SimpleNamespace(model=model), settings, grad_accum=1, seed=0, model=model)


def test_a_planted_stale_group_is_dropped_whole_and_counted():
    settings = GRPOSettings(prompts_per_step=3, group_size=2, max_new_tokens=3, max_off_policy_steps=1)
    tasks = [Task(id="t", prompt="p", verifier={"type": "exact", "answer": "1"})]
    source = RolloutSource(tasks, object(), settings, grad_accum=2, seed=0)
    # trainer at version 5, K = 1: groups of versions 5 (0 old) and 4 (1 old) train; the third group
    # holds one token of version 3 (2 old) among tokens of version 4, so the whole group goes
    fresh = _group(1, [[5, 5, 5], [5, 5]], [1.0, -1.0])
    behind = _group(3, [[4, 4, 4], [4, 4, 4]], [0.5, -0.5])
    stale = _group(5, [[4, 4, 4], [4, 3]], [2.0, -2.0])
    source.buffer = [grpo_tensors([fresh, behind, stale]), grpo_tensors([_group(7, [[3], [2, 2]], [1.0, -1.0])])]
    source.on_weights(5, step=5)
    first, second = source.next_batch(), source.next_batch()
    assert first.prompt_ids.tolist() == [[1, 2], [3, 4]]
    assert first.advantages.tolist() == [1.0, -1.0, 0.5, -0.5]
    assert first.versions.tolist() == [[5, 5, 5], [5, 5, -1], [4, 4, 4], [4, 4, 4]]
    assert first.n_real_tokens == 2 * 2 + (3 + 2 + 3 + 3)  # two prompts of 2, the kept completions
    assert (second.n_real_tokens, int(second.loss_mask.sum())) == (0, 0)  # every group stale: nothing trains
    stats = source.stats()
    # 2 of the step's 4 groups dropped; only the kept tokens are counted as served: 5 fresh, 6 one step old
    assert (stats["stale_dropped_groups"], stats["stale_dropped_share"]) == (2.0, 0.5)
    assert (stats["staleness_hist/0"], stats["staleness_hist/1"], stats["staleness_max"]) == (5.0, 6.0, 1.0)
    assert "staleness_hist/2" not in stats
    source.close()


def test_the_bound_counts_no_group_without_versions_and_spares_a_batch_within_it():
    batch = grpo_tensors([_group(1, [[4, 4], [4]], [1.0, -1.0]), _group(3, [[5], [5, 5]], [1.0, -1.0])])
    assert drop_stale_groups(batch, 5, 1) == (batch, 2, 0)  # within the bound: the very batch
    assert drop_stale_groups(batch, 6, 1)[1:] == (2, 1)  # at 6 the version-4 group is 2 old
    assert drop_stale_groups(batch.without_loss(), 9, 0)[1:] == (0, 0)  # a filler is judged on nothing
