"""Reward model: a causal LM's decoder with a scalar head, one score per sequence.

The score is read at each sequence's *last real token*: the last position whose
attention mask is 1. The classic bug is to find the end by searching for the pad token
(`input_ids == pad_token_id`): when pad == eos (SmolLM2, Llama-style tokenizers padded
with eos) the real end-of-turn token is taken for padding, so the score is read one
token early, or, in a conversation with several turns, at the end of the first one.
The attention mask is the only truth about what is padding; left and right padding both
work.

On disk a reward model is the LM's directory (a full model or a PEFT adapter, as every
Tempering run saves it) plus `reward_head.safetensors` and `reward_head.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from tempering.atomic import write_text_atomic
from tempering.data.padding import right_pad
from tempering.errors import InputNotFound

HEAD_WEIGHTS = "reward_head.safetensors"
HEAD_META = "reward_head.json"
FORMAT = "tempering-reward-v1"


class NotARewardModel(InputNotFound):
    """A model directory without a reward head."""


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last position with mask 1 in each row, (B,); any padding side.

    Raises:
        ValueError: a row has no real token at all.
    """
    mask = attention_mask.bool()
    if not bool(mask.any(dim=1).all()):
        raise ValueError("a sequence in the batch has no real tokens (its attention mask is all 0)")
    width = mask.shape[1]
    return width - 1 - mask.flip(1).int().argmax(dim=1)  # the first 1 from the right


class RewardModel(torch.nn.Module):
    """`lm`'s decoder (plain or PEFT-wrapped) with a Linear(hidden, 1) head.

    `forward(input_ids, attention_mask)` returns (B,) float32 scores. The LM head (the
    vocabulary projection) is never run.
    """

    def __init__(self, lm: Any, head: torch.nn.Linear | None = None, seed: int = 0):
        super().__init__()
        self.lm = lm
        if head is None:
            hidden = lm.config.hidden_size
            head = torch.nn.Linear(hidden, 1)
            # small init (std = the model's initializer range): scores start near 0, so the
            # first Bradley-Terry steps see log 2 and a gradient that does not saturate
            std = float(getattr(lm.config, "initializer_range", 0.02))
            gen = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * std)
                head.bias.zero_()
        self.score_head = head

    def get_decoder(self) -> Any:
        return self.lm.get_decoder()

    def get_input_embeddings(self) -> Any:
        return self.lm.get_input_embeddings()

    @property
    def is_peft(self) -> bool:
        return hasattr(self.lm, "peft_config")

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Scores (B,) of each sequence at its last real token."""
        positions = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)  # right or left padding
        hidden = self.get_decoder()(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, use_cache=False
        ).last_hidden_state  # (B, T, H)
        last = last_token_index(attention_mask)
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (B, H)
        return self.score_head(pooled).squeeze(-1).float()

    def forward_grouped(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Scores (B*G,) of G completions per prompt, each prompt run through the decoder once.

        `prompt_ids`/`prompt_mask` are (B, P), left-padded; completions (B*G, C), right-padded,
        grouped contiguously. The prompt's KV cache is repeated G times (gradients flow back
        through the repeat), as `models.logprobs.grouped_logprobs` does for GRPO. Equal to
        `forward` over each [prompt | completion] row; the score is read at the completion's
        last real token.
        """
        from transformers import DynamicCache

        from tempering.models.logprobs import cache_keyword

        group = completion_ids.shape[0] // prompt_ids.shape[0]
        decoder, cache_kw, cache = self.get_decoder(), cache_keyword(self.lm), DynamicCache()
        p_pos = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
        decoder(
            input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=p_pos, use_cache=True, **{cache_kw: cache}
        )
        if group > 1:
            cache.batch_repeat_interleave(group)
            prompt_mask = prompt_mask.repeat_interleave(group, dim=0)
            p_pos = p_pos.repeat_interleave(group, dim=0)
        c_pos = p_pos[:, -1:] + 1 + torch.arange(completion_ids.shape[1], device=completion_ids.device)
        hidden = decoder(
            input_ids=completion_ids,
            attention_mask=torch.cat([prompt_mask, completion_mask], dim=1),
            position_ids=c_pos,
            use_cache=True,
            **{cache_kw: cache},
        ).last_hidden_state
        last = last_token_index(completion_mask)
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        return self.score_head(pooled).squeeze(-1).float()

    def save_pretrained(self, out: str | Path, **_: Any) -> Path:
        """Save the LM (adapter or full weights) and the head; `Stage.save_model` calls this."""
        from safetensors.torch import save_file

        out = Path(out)
        self.lm.save_pretrained(out, **({"save_embedding_layers": False} if self.is_peft else {}))
        weights = {k: v.detach().float().contiguous().cpu() for k, v in self.score_head.state_dict().items()}
        save_file(weights, str(out / HEAD_WEIGHTS))
        write_text_atomic(
            out / HEAD_META,
            json.dumps({"format": FORMAT, "hidden_size": self.score_head.in_features, "pooling": "last_real_token"}),
        )
        return out


def is_reward_model(path: str | Path) -> bool:
    return (Path(path) / HEAD_WEIGHTS).is_file()


def load_reward_model(spec: str | Path, dtype: str = "float32", trainable: bool = False) -> RewardModel:
    """A saved reward model (`runs/NAME/final` of `temper rm`), in eval mode unless `trainable`.

    Raises:
        NotARewardModel: `spec` has no reward head (e.g. a plain LM or SFT run).
    """
    from safetensors.torch import load_file

    from tempering.models.load import load_model

    path = Path(spec).expanduser()
    if not is_reward_model(path):
        raise NotARewardModel(f"{spec}: not a reward model (no {HEAD_WEIGHTS}; train one with `temper rm`)")
    meta = json.loads((path / HEAD_META).read_text()) if (path / HEAD_META).is_file() else {}
    if meta.get("format", FORMAT) != FORMAT:
        raise NotARewardModel(f"{spec}: reward head format {meta.get('format')!r}, expected {FORMAT!r}")
    lm = load_model(str(path), dtype=dtype, trainable_adapter=trainable)
    weights = load_file(str(path / HEAD_WEIGHTS))
    head = torch.nn.Linear(weights["weight"].shape[1], 1)
    head.load_state_dict(weights)
    model = RewardModel(lm, head.to(getattr(torch, dtype)))
    model.train(trainable)
    return model


@torch.no_grad()
def score_ids(
    model: RewardModel, sequences: list[list[int]], pad_id: int, batch_size: int = 16, precision: str = "auto"
) -> list[float]:
    """Scores of token sequences, right-padded in batches of `batch_size` (order kept)."""
    from tempering.models.precision import autocast, resolve_precision

    precision = resolve_precision(precision)
    device = next(model.parameters()).device
    out: list[float] = []
    for start in range(0, len(sequences), batch_size):
        ids, mask = right_pad(sequences[start : start + batch_size], pad_id)
        with autocast(precision, device):
            out += model(ids.to(device), mask.to(device)).tolist()
    return out


def scored_prefix(ids: list[int], mask: list[int]) -> list[int]:
    """`ids` through the last position where `mask` is 1: the answer's end-of-turn token.

    Template glue after it (SmolLM2's newline after `<|im_end|>`) is the same for every
    answer and is not the model's to judge; the score is read at the end of the answer.
    """
    last = max((i for i, m in enumerate(mask) if m), default=None)
    if last is None:
        raise ValueError("nothing to score: the sequence has no answer tokens")
    return ids[: last + 1]
