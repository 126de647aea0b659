"""The DPO objective on a tiny model: the shared prompt forward equals separate full-sequence
forwards, the reference is the model with adapters off, and DPO learns a preference."""

import random
from pathlib import Path

import pytest
import torch

from tempering.config import PreferenceSettings, TrainSettings
from tempering.data.pair_batches import PairBatches, collate_pairs
from tempering.data.pair_render import RenderedPair
from tempering.models.logprobs import sequence_logprob_sums
from tempering.models.lora import check_kl_reference, continues_adapter
from tempering.objectives.dpo import PreferenceObjective, pair_sequence_logps, pair_sums
from tempering.train.reference import cached_reference_logps, compute_reference_logps
from tempering.train.trainer import Trainer
from tests.conftest import tiny_llama

VOCAB = 64


def random_pairs(n: int, seed: int = 0) -> list[RenderedPair]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(2, 9))]
        sides = []
        for _ in range(2):
            ids = [rng.randrange(3, VOCAB) for _ in range(rng.randint(2, 7))]
            mask = [1] * len(ids)
            mask[rng.randrange(len(ids))] = 0  # a context token inside the answer (a tool result)
            sides += [ids, mask]
        out.append(RenderedPair(prompt, *sides, weight=rng.choice([1.0, 0.5])))
    return out


def separate_sums(model, pairs, side):
    """log p(answer | prompt) from one full [prompt | answer] forward per pair."""
    out = []
    for p in pairs:
        ids = torch.tensor([p.prompt_ids + p.ids(side)])
        mask = torch.tensor([[0] * len(p.prompt_ids) + p.mask(side)])
        out.append(sequence_logprob_sums(model, ids, torch.ones_like(ids), mask))
    return torch.cat(out)


def test_shared_prompt_forward_equals_separate_forwards():
    model = tiny_llama(VOCAB).eval()
    pairs = random_pairs(5)
    with torch.no_grad():
        chosen, rejected, _ = pair_sequence_logps(model, collate_pairs(pairs))
        torch.testing.assert_close(chosen, separate_sums(model, pairs, "chosen"), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(rejected, separate_sums(model, pairs, "rejected"), atol=1e-5, rtol=1e-5)


def test_batch_layout_interleaves_sides_and_counts_tokens():
    pairs = random_pairs(3, seed=1)
    b = collate_pairs(pairs)
    assert b["prompt_ids"].shape[0] == 3 and b["completion_ids"].shape[0] == 6
    assert b["completion_ids"][3, : len(pairs[1].rejected_ids)].tolist() == pairs[1].rejected_ids
    assert b["score_mask"][2].sum() == sum(pairs[1].chosen_mask)
    assert b["prompt_ids"][0, -len(pairs[0].prompt_ids) :].tolist() == pairs[0].prompt_ids  # left-padded
    assert b["n_real_tokens"] == sum(len(p.prompt_ids) + len(p.chosen_ids) + len(p.rejected_ids) for p in pairs)
    assert b["weights"].tolist() == [p.weight for p in pairs]


def lora_model(continued: bool = True):
    """A tiny model with LoRA on q and v; `continued`: the adapters already change the model (as
    after a LoRA SFT stage), else fresh (B = 0, as `get_peft_model` makes them)."""
    from peft import LoraConfig, get_peft_model

    model = tiny_llama(VOCAB)
    torch.manual_seed(1)
    peft = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    if continued:
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.5)
    return peft


def test_a_fresh_adapter_reference_is_the_base_online_or_cached(tmp_path):
    model, pairs = lora_model(continued=False), random_pairs(6, seed=2)
    assert not continues_adapter(model)
    ref = compute_reference_logps(pair_sums, model, pairs, batch_size=4, precision="fp32")
    with torch.no_grad(), model.disable_adapter():
        torch.testing.assert_close(ref[:, 0], separate_sums(model, pairs, "chosen"), atol=1e-5, rtol=1e-5)
    # the online reference (adapters off each step) gives the cached numbers
    objective = PreferenceObjective(PreferenceSettings())
    online_c, online_r = objective.reference(model, collate_pairs(pairs))
    torch.testing.assert_close(torch.stack([online_c, online_r], 1), ref, atol=1e-5, rtol=1e-5)

    tok = type("Tok", (), {"chat_template": "t", "__len__": lambda self: VOCAB})()
    first, rec1 = cached_reference_logps(pair_sums, model, tok, pairs, 4, "fp32", tmp_path)
    with torch.no_grad():  # other fresh adapter weights (another seed): same reference, same key
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.add_(1.0)
    second, rec2 = cached_reference_logps(pair_sums, model, tok, pairs, 4, "fp32", tmp_path)
    assert (rec1["hit"], rec2["hit"]) == (False, True) and rec1["key"] == rec2["key"]
    assert Path(rec2["path"]).is_file() and torch.equal(first, second)
    _, rec3 = cached_reference_logps(pair_sums, model, tok, pairs[:5], 4, "fp32", tmp_path)
    assert rec3["key"] != rec1["key"] and not rec3["hit"]  # other data, other key


def test_a_continued_adapter_reference_is_the_starting_policy_not_the_base(tmp_path):
    model, pairs = lora_model(continued=True), random_pairs(6, seed=2)
    assert continues_adapter(model)
    ref = compute_reference_logps(pair_sums, model, pairs, batch_size=4, precision="fp32")
    with torch.no_grad():
        policy, _, _ = pair_sequence_logps(model, collate_pairs(pairs))
    torch.testing.assert_close(ref[:, 0], policy, atol=1e-5, rtol=1e-5)  # DPO's step 1 starts at margin 0
    with torch.no_grad(), model.disable_adapter():
        assert (separate_sums(model, pairs, "chosen") - ref[:, 0]).abs().max() > 1e-3  # the base differs
    tok = type("Tok", (), {"chat_template": "t", "__len__": lambda self: VOCAB})()
    _, continued = cached_reference_logps(pair_sums, model, tok, pairs, 4, "fp32", tmp_path)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(2.0)
    _, other = cached_reference_logps(pair_sums, model, tok, pairs, 4, "fp32", tmp_path)
    assert continued["key"] != other["key"] and not other["hit"]  # another starting policy, another key
    with pytest.raises(ValueError, match=r"grpo.beta > 0 penalises the distance to the base"):
        check_kl_reference(model, 0.04, "grpo.beta")
    check_kl_reference(model, 0.0, "grpo.beta")
    check_kl_reference(lora_model(continued=False), 0.04, "grpo.beta")


@pytest.mark.parametrize("loss", ["dpo", "ipo", "simpo"])
def test_preference_training_learns_the_preference(loss, tmp_path):
    model = lora_model()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.zero_()
    pairs = random_pairs(8, seed=3)
    ref = compute_reference_logps(pair_sums, model, pairs, 8, "fp32")
    beta = {"dpo": 0.5, "ipo": 0.5, "simpo": 2.0}[loss]
    objective = PreferenceObjective(PreferenceSettings(loss=loss, beta=beta, simpo_gamma=0.2))
    batches = PairBatches(pairs, 8, seed=0, ref_logps=ref)
    settings = TrainSettings(
        steps=40,
        batch_size=8,
        precision="fp32",
        optim={"lr": 2e-2, "schedule": "constant", "max_grad_norm": None},
        guard={"enabled": False},
        checkpoint={"every": 100},
    )
    first = objective.loss(model, batches.next_batch())[1]
    result = Trainer(model, objective, batches, settings, tmp_path).fit()
    last = result.history[-1]
    assert first["reward_accuracy"] <= 0.75
    assert last["reward_accuracy"] == 1.0 and last["reward_margin"] > first["reward_margin"]
    assert result.losses[-1] < result.losses[0]


def test_pair_batches_resume_and_refuse_changed_data():
    pairs = random_pairs(10, seed=4)
    ref = torch.arange(20, dtype=torch.float32).reshape(10, 2)
    a = PairBatches(pairs, 3, seed=0, ref_logps=ref)
    a.next_batch()
    state = a.state_dict()
    expected = a.next_batch()
    b = PairBatches(pairs, 3, seed=0, ref_logps=ref)
    b.load_state_dict(state)
    got = b.next_batch()
    assert got["index"].tolist() == expected["index"].tolist()
    assert torch.equal(got["ref_logps"], ref[got["index"]])  # each pair keeps its own reference row
    with pytest.raises(ValueError, match="pairs changed"):
        PairBatches(pairs[:9], 3, seed=0).load_state_dict(state)
    with pytest.raises(ValueError, match="expected"):
        PairBatches(pairs, 3, seed=0, ref_logps=ref[:5])
