"""Trained ids == sampled ids, and the loss mask covers exactly the model's tokens,
on SmolLM2's template (Tempering's tool-call form) and on the Qwen2.5 template (native tool calls)."""

import copy
import importlib.resources

import pytest

from tempering.agents.policies import MALFORMED, mistake, mistake_turns, oracle, recover
from tempering.agents.render import AgentRenderer
from tempering.agents.rollout import EpisodeSettings, agent_rollout
from tempering.agents.tasks import builtin_tasks
from tempering.config import SamplingSettings
from tests.agents.scripted_engine import PolicyEngine


@pytest.fixture(scope="module")
def qwen_tokenizer(smol_tokenizer):
    tok = copy.deepcopy(smol_tokenizer)  # same vocabulary; the real Qwen2.5 template (shipped with TRL)
    tok.chat_template = (importlib.resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    return tok


@pytest.fixture(scope="module")
def tasks(pool):
    arith = [t for t in builtin_tasks("tool_arith") if t.split == "heldout"][:3]
    retry = builtin_tasks("retry")[:2]
    ws = [next(t for t in builtin_tasks("workspace") if t.tier == tier) for tier in (1, 3)]
    return arith + retry + ws


def check_token_exact(batch, engine, eot_id, truncated_trainable=False):
    """Every turn's ids are the engine's sampled ids in the context it was prompted with; the
    mask is 1 exactly there (unless masked for truncation); log-probs are the sampled ones."""
    sampled = {tuple(p + ids): (len(p), ids) for p, ids in engine.calls}
    n_turns = 0
    for group in batch.groups:
        for ep in group:
            tr = ep.trajectory
            expected_mask = [0] * len(tr.token_ids)
            for turn in ep.turns:
                end = turn.start + len(turn.token_ids)
                assert (tuple(tr.token_ids[:end])) in sampled  # prompted with exactly the ids before it
                assert sampled[tuple(tr.token_ids[:end])] == (turn.start, turn.token_ids)
                assert tr.token_ids[turn.start : end] == turn.token_ids
                if turn.finish_reason != "length" or truncated_trainable:
                    expected_mask[turn.start : end] = [1] * len(turn.token_ids)
                    assert tr.logprobs[turn.start : end] == turn.logprobs
                n_turns += 1
            assert tr.loss_mask == expected_mask
            assert all(lp == 0.0 for lp, m in zip(tr.logprobs, tr.loss_mask) if m == 0)
    return n_turns


@pytest.mark.parametrize("template", ["smollm2", "qwen2.5"])
def test_every_turn_is_token_exact(template, smol_tokenizer, qwen_tokenizer, tasks, pool):
    tok = smol_tokenizer if template == "smollm2" else qwen_tokenizer
    renderer = AgentRenderer(tok)
    assert renderer.style == ("tempering" if template == "smollm2" else "template")
    engine = PolicyEngine(tok, recover, tasks, native=template == "qwen2.5")
    batch = agent_rollout(
        tasks,
        engine,
        renderer,
        pool,
        SamplingSettings(max_new_tokens=400),
        EpisodeSettings(max_context_tokens=4096),
        n=2,
        seed=0,
    )
    assert check_token_exact(batch, engine, renderer.eot_id) == len(engine.calls) > 2 * len(tasks) * 2
    for group in batch.groups:
        for ep in group:
            assert ep.stats.success and ep.stats.recovered and ep.trajectory.reward.passed, ep.task.id
            assert ep.trajectory.finish_reason == "stop" and ep.trajectory.status == "scored"


def test_inserted_tokens_are_the_templates_own_turns(smol_tokenizer, qwen_tokenizer, tasks, pool):
    task = tasks[0]  # arithmetic: one malformed call, then calculator, then submit
    for tok, native, between in [
        (smol_tokenizer, False, "\n<|im_start|>tool\nerror: invalid JSON"),
        (qwen_tokenizer, True, "\n<|im_start|>user\n<tool_response>\nerror: invalid JSON"),
    ]:
        renderer = AgentRenderer(tok)
        engine = PolicyEngine(tok, recover, [task], native=native)
        ep = agent_rollout([task], engine, renderer, pool, SamplingSettings(max_new_tokens=200)).groups[0][0]
        first, second = ep.turns[0], ep.turns[1]
        inserted = tok.decode(ep.trajectory.token_ids[first.start + len(first.token_ids) : second.start])
        assert inserted.startswith(between) and inserted.endswith("<|im_end|>\n<|im_start|>assistant\n")
        written = MALFORMED.replace("<tool_call>", "<tool_call>\n").replace("</tool_call>", "\n</tool_call>")
        assert tok.decode(first.token_ids) == (written if native else MALFORMED) + "<|im_end|>"
        answer = ep.task.goal["value"]
        assert f"\n{answer}" in tok.decode(ep.trajectory.token_ids[second.start + len(second.token_ids) :])


def test_sampled_ids_survive_where_re_rendering_would_not(smol_tokenizer, tasks, pool):
    """One token per character is a valid sample; re-applying the template to the final
    messages tokenises the same text differently, so only token-in/token-out trains on it."""
    renderer = AgentRenderer(smol_tokenizer)
    engine = PolicyEngine(smol_tokenizer, oracle, tasks[:1], char_tokens=True)
    batch = agent_rollout(tasks[:1], engine, renderer, pool, SamplingSettings(max_new_tokens=400))
    ep = batch.groups[0][0]
    check_token_exact(batch, engine, renderer.eot_id)
    rerendered = smol_tokenizer.apply_chat_template(ep.trajectory.messages, tokenize=True)
    rerendered = list(rerendered["input_ids"] if hasattr(rerendered, "keys") else rerendered)
    assert rerendered != ep.trajectory.token_ids
    # same text (the re-render also holds the final 'submitted' tool turn, which no turn followed)
    assert smol_tokenizer.decode(rerendered).startswith(smol_tokenizer.decode(ep.trajectory.token_ids))


@pytest.mark.parametrize("mode", ["mask", "penalize"])
def test_a_truncated_turn_ends_the_episode_masked_or_penalised(mode, smol_tokenizer, tasks, pool):
    renderer = AgentRenderer(smol_tokenizer)
    task = tasks[0]
    engine = PolicyEngine(smol_tokenizer, recover, [task])
    settings = EpisodeSettings(truncated_turns=mode, truncation_penalty=0.5)
    # the malformed first call fits in 40 tokens; the calculator call after it does not
    batch = agent_rollout([task], engine, renderer, pool, SamplingSettings(max_new_tokens=28), settings)
    ep = batch.groups[0][0]
    tr = ep.trajectory
    assert [t.finish_reason for t in ep.turns] == ["stop", "length"] and tr.finish_reason == "length"
    cut = ep.turns[1]
    span = slice(cut.start, cut.start + len(cut.token_ids))
    assert tr.token_ids[span] == cut.token_ids and len(cut.token_ids) == 28
    if mode == "mask":
        assert tr.loss_mask[span] == [0] * 28 and tr.reward.value == 0.0
    else:
        assert tr.loss_mask[span] == [1] * 28 and tr.reward.value == -0.5
    assert not tr.reward.passed and check_token_exact(batch, engine, renderer.eot_id, mode == "penalize") == 2


def test_the_context_budget_ends_the_episode_cleanly(smol_tokenizer, tasks, pool):
    renderer = AgentRenderer(smol_tokenizer)
    task = tasks[0]
    engine = PolicyEngine(smol_tokenizer, recover, [task])
    prompt = len(renderer.prompt_ids([{"role": "user", "content": task.prompt}], task.tools))
    budget = prompt + 60  # room for the first turn and its error message, not for a second turn
    batch = agent_rollout(
        [task],
        engine,
        renderer,
        pool,
        SamplingSettings(max_new_tokens=100),
        EpisodeSettings(max_context_tokens=budget, min_turn_tokens=8),
    )
    ep = batch.groups[0][0]
    assert ep.trajectory.finish_reason == "context" and len(ep.trajectory.token_ids) <= budget
    assert not ep.trajectory.reward.passed and ep.trajectory.status == "scored"
    assert all(t.finish_reason == "stop" for t in ep.turns)  # no turn was cut mid-way
    check_token_exact(batch, engine, renderer.eot_id)


def test_real_engine_sampling_is_token_exact(smol_tokenizer, tasks, pool):
    """A real `HFEngine` (a tiny random model over SmolLM2's vocabulary) sampling at temperature 1:
    random turns, most cut by the token limit, all recorded exactly."""
    from tempering.rollout.engine import HFEngine
    from tests.conftest import tiny_llama

    class Recording(HFEngine):
        calls = []

        def generate(self, prompts, params):
            groups = super().generate(prompts, params)
            for p, g in zip(prompts, groups):
                self.calls.append((list(p), list(g[0].token_ids)))
            return groups

    model = tiny_llama(vocab=len(smol_tokenizer))
    engine = Recording(model, smol_tokenizer, precision="fp32")
    renderer = AgentRenderer(smol_tokenizer)
    batch = agent_rollout(
        tasks[:3],
        engine,
        renderer,
        pool,
        SamplingSettings(max_new_tokens=12),
        EpisodeSettings(max_context_tokens=400),
        n=2,
        seed=1,
    )
    assert check_token_exact(batch, engine, renderer.eot_id) == len(engine.calls) >= 6
    assert any(ep.turns[-1].finish_reason == "length" for g in batch.groups for ep in g)


def test_scripted_opening_turns_are_played_masked_and_the_model_continues_from_their_feedback(smol_tokenizer, pool):
    """A recovery probe: the task's scripted mistake opens the episode (stepped, counted, mask 0)
    and the model continues from the environment's real error. The ids equal those of an engine
    that wrote the mistake itself; only the mask of that first turn differs."""
    tasks = [t for t in builtin_tasks("tool_notation") if t.split == "heldout" and t.mistake][:3]
    renderer = AgentRenderer(smol_tokenizer)
    sampling = SamplingSettings(max_new_tokens=200)
    probe_engine = PolicyEngine(smol_tokenizer, mistake, tasks)
    probe = agent_rollout(tasks, probe_engine, renderer, pool, sampling, opening_turns=mistake_turns)
    played_engine = PolicyEngine(smol_tokenizer, mistake, tasks)
    played = agent_rollout(tasks, played_engine, renderer, pool, sampling)
    assert len(probe_engine.calls) == len(played_engine.calls) - len(tasks)  # never asked for the scripted turn
    for task, [ep], [ref] in zip(tasks, probe.groups, played.groups):
        first = ep.turns[0]
        assert first.finish_reason == "scripted"
        assert smol_tokenizer.decode(first.token_ids[:-1]) == mistake_turns(task)[0]
        assert ep.stats.success and ep.stats.tool_errors + ep.stats.invalid_calls >= 1  # the scripted error counts
        assert ep.trajectory.token_ids == ref.trajectory.token_ids
        end = first.start + len(first.token_ids)
        assert ep.trajectory.loss_mask[first.start : end] == [0] * len(first.token_ids)
        assert ref.trajectory.loss_mask[first.start : end] == [1] * len(first.token_ids)
        assert ep.trajectory.loss_mask[end:] == ref.trajectory.loss_mask[end:]
    feedback = smol_tokenizer.decode(probe_engine.calls[0][0])  # what the model saw before its first turn
    assert "thousands separators" in feedback
