"""Reward model: pooling at the last real token (pad == eos), save/load round trip."""

import pytest
import torch

from tempering.data.padding import right_pad
from tempering.models.reward import (
    NotARewardModel,
    RewardModel,
    last_token_index,
    load_reward_model,
    score_ids,
)
from tests.conftest import tiny_llama

EOS = 2  # tiny_llama's eos; used as the pad token below, as SmolLM2 does


def test_last_token_index_any_padding_side():
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert last_token_index(right).tolist() == [2, 4, 0]
    assert last_token_index(left).tolist() == [4, 4]
    with pytest.raises(ValueError, match="no real tokens"):
        last_token_index(torch.tensor([[0, 0]]))


def _left_pad(seqs, pad):
    width = max(map(len, seqs))
    ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
    return ids, mask


def test_score_is_read_at_last_real_token_when_pad_is_eos():
    rm = RewardModel(tiny_llama(seed=1)).eval()
    # real sequences that contain eos in the middle (end of a first turn) and at the end
    seqs = [[5, 6, EOS, 7, 8, EOS], [9, 10, EOS], [11, EOS, 12, 13, 14, 15, 16, EOS, 17, EOS]]
    with torch.no_grad():
        alone = torch.stack([rm(torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long))[0] for s in seqs])
        right = rm(*right_pad(seqs, EOS))
        left = rm(*_left_pad(seqs, EOS))
    assert torch.allclose(right, alone, atol=1e-5)
    assert torch.allclose(left, alone, atol=1e-5)
    # the classic bug (end = first pad token - 1) reads the wrong place on these rows
    ids, mask = right_pad(seqs, EOS)
    naive = (ids == EOS).int().argmax(dim=1) - 1
    assert naive.tolist() != last_token_index(mask).tolist()
    with torch.no_grad():
        hidden = rm.get_decoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        wrong = rm.score_head(hidden[torch.arange(3), naive]).squeeze(-1)
    assert not torch.allclose(wrong, alone, atol=1e-3)


def test_score_equals_head_of_last_hidden_state():
    lm = tiny_llama(seed=2)
    rm = RewardModel(lm).eval()
    seq = [4, 5, 6, 7]
    with torch.no_grad():
        hidden = lm.get_decoder()(input_ids=torch.tensor([seq])).last_hidden_state[0, -1]
        want = float(hidden @ rm.score_head.weight[0] + rm.score_head.bias[0])
        got = score_ids(rm, [seq, [4, 5]], pad_id=EOS, precision="fp32")
    assert abs(got[0] - want) < 1e-5
    assert len(got) == 2


def test_gradients_reach_head_and_decoder():
    rm = RewardModel(tiny_llama(seed=3))
    ids, mask = right_pad([[3, 4, 5], [6, 7]], EOS)
    rm(ids, mask).sum().backward()
    assert rm.score_head.weight.grad is not None and rm.score_head.weight.grad.abs().sum() > 0
    emb = rm.lm.get_input_embeddings().weight.grad
    assert emb is not None and emb.abs().sum() > 0


@pytest.mark.parametrize("lora", [False, True])
def test_save_and_load_round_trip(tmp_path, lora):
    base_dir = tmp_path / "base"
    tiny_llama(seed=4).save_pretrained(base_dir)
    from tempering.config import LoraSettings
    from tempering.models.load import load_model
    from tempering.models.lora import apply_lora

    lm = load_model(str(base_dir))
    if lora:
        lm = apply_lora(lm, LoraSettings(r=4, alpha=8), str(base_dir))
        with torch.no_grad():  # non-zero adapters, so a lost adapter would show
            for name, p in lm.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
    rm = RewardModel(lm, seed=7).eval()
    out = tmp_path / "rm"
    rm.save_pretrained(out)
    back = load_reward_model(out)
    seqs = [[3, 4, 5, EOS], [6, 7, EOS]]
    assert not back.training
    assert score_ids(back, seqs, EOS, precision="fp32") == pytest.approx(
        score_ids(rm, seqs, EOS, precision="fp32"), abs=1e-5
    )


def test_plain_model_dir_is_not_a_reward_model(tmp_path):
    tiny_llama().save_pretrained(tmp_path / "lm")
    with pytest.raises(NotARewardModel, match="not a reward model"):
        load_reward_model(tmp_path / "lm")


def test_grouped_forward_equals_full_forward_and_its_gradients():
    rm = RewardModel(tiny_llama(seed=5))
    prompts = [[5, 6, EOS, 7], [8, 9]]
    completions = [[10, 11, EOS], [12, EOS], [13, 14, 15, 16, EOS], [17, EOS]]  # 2 per prompt
    full = [p + c for p, c in zip([prompts[0]] * 2 + [prompts[1]] * 2, completions)]
    p_ids, p_mask = _left_pad(prompts, EOS)
    c_ids, c_mask = right_pad(completions, EOS)
    grouped = rm.forward_grouped(p_ids, p_mask, c_ids, c_mask)
    grouped.sum().backward()
    g_grad = rm.lm.get_input_embeddings().weight.grad.clone()
    rm.zero_grad()
    plain = rm(*right_pad(full, EOS))
    plain.sum().backward()
    assert torch.allclose(grouped, plain, atol=1e-5)
    assert torch.allclose(g_grad, rm.lm.get_input_embeddings().weight.grad, atol=1e-5)
