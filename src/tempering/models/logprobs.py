"""Log-probabilities of given tokens under a causal LM: the one place they are computed.

SFT's loss, GRPO's policy and reference log-probs, the rollout policy's log-probs for
mu > 1, and the per-sequence sums that DPO and reward models need all go through
`head_logprobs`, so a change of temperature handling or masking happens once.

  head_logprobs          hidden states -> per-token log-probs of targets under a mask
  token_logprobs         a model over whole sequences -> per-token log-probs (B, T)
  sequence_logprob_sums  the same summed over a loss mask -> (B,)
  grouped_logprobs       G completions per prompt, the prompt run once (GRPO's fast path;
                         whole rows under activation checkpointing, models/checkpointing.py)
  grouped_hidden         the decoder states behind grouped_logprobs (losses over the whole
                         next-token distribution project them themselves, through output_head)
  output_head            the LM head, refused for models that cap logits after it

Cost: the LM head (49k x 576 for SmolLM2) and a float32 log-softmax over the vocabulary
dominate on small models, so hidden states are gathered at the masked-in positions first
and only those are projected.

Memory: the full (tokens x vocabulary) float32 logits are never held at once. Scored positions
go through the head `LOGPROB_CHUNK_TOKENS` at a time (fewer for a wider vocabulary: at most
`LOGPROB_CHUNK_LOGITS` logits a chunk, 192 positions of Gemma 3's 262k); under activation checkpointing
(`train.gradient_checkpointing`, `models/checkpointing.py: checkpointed_now`) each chunk is
checkpointed too, so backward keeps only the chunk's inputs and recomputes its logits (one more
head matmul per chunk). At 8,192 scored tokens of a 49k vocabulary that is 0.2 GB of logits live
instead of 1.6 GB per copy. Without the switch the chunks' logits stay for the backward and no
matmul is repeated. Results equal the one-shot path (same ops, same order).
"""

from __future__ import annotations

import inspect
from typing import Any, Literal, overload

import torch
from torch.utils.checkpoint import checkpoint

from tempering.errors import UserError

LOGPROB_CHUNK_TOKENS = 1024  # scored positions per LM-head chunk: 1024 x 49k x 4 B = 0.2 GB of logits
LOGPROB_CHUNK_LOGITS = LOGPROB_CHUNK_TOKENS * 49152
"""At most this many logits per chunk (the default model's chunk, 0.2 GB in float32): a wider
vocabulary takes fewer positions a chunk (Gemma 3's 262k: 192), so its chunk is no larger."""


def chunk_positions(chunk_tokens: int | None, vocab: int | None) -> int | None:
    """Scored positions per LM-head chunk: `chunk_tokens`, fewer where `vocab` logits a position
    would pass `LOGPROB_CHUNK_LOGITS` a chunk (None: all at once, as asked; vocab None: unknown)."""
    if chunk_tokens is None or vocab is None:
        return chunk_tokens
    return max(1, min(chunk_tokens, LOGPROB_CHUNK_LOGITS // vocab))


def output_head(model: Any) -> torch.nn.Module:
    """The LM head that turns decoder states into logits, as every log-prob here applies it.

    Raises:
        UserError: the model scales its logits after the head (`final_logit_softcapping`, Gemma 2):
            projecting decoder states through the head alone would give other log-probs than its forward.
    """
    cap = getattr(getattr(model, "config", None), "final_logit_softcapping", None)
    if cap is not None:
        raise UserError(
            f"final_logit_softcapping: {cap} ({model.config.model_type}) caps logits after the LM head, "
            "which Tempering's log-probs do not apply yet; use a model without it (Gemma 3, Llama, Qwen)"
        )
    return model.get_output_embeddings()


def cache_keyword(model: Any) -> str:
    """transformers renamed `past_key_values` to `cache` (5.x); use whichever the model takes."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


@overload
def head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float,
    with_entropy: Literal[True],
    chunk_tokens: int | None = ...,
    recompute: bool = ...,
) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = ...,
    *,
    with_entropy: Literal[True],
    chunk_tokens: int | None = ...,
    recompute: bool = ...,
) -> tuple[torch.Tensor, torch.Tensor]: ...


@overload
def head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = ...,
    with_entropy: bool = ...,
    chunk_tokens: int | None = ...,
    recompute: bool = ...,
) -> tuple[torch.Tensor, torch.Tensor | None]: ...


def head_logprobs(
    head: torch.nn.Module,
    hidden: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_tokens: int | None = LOGPROB_CHUNK_TOKENS,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(head(hidden) / temperature)[target] where `mask`, else 0.

    Args:
        head: the output projection H -> V.
        hidden: (B, T, H) states; hidden[b, t] is the state that predicts targets[b, t].
        targets: (B, T) token ids (any value, e.g. an ignore index, where `mask` is 0).
        mask: (B, T) 1/True on the positions to score.
        temperature: 0 and 1 both mean the plain softmax (greedy samples report temperature-1 log-probs).
        with_entropy: also return the entropy of each scored position's distribution (no gradient).
        chunk_tokens: scored positions per head chunk (fewer for a head wider than the default
            model's, `chunk_positions`); None projects them all at once.
        recompute: checkpoint each chunk (when there are several and gradients flow): its logits
            are freed after the forward and recomputed in the backward.
    Returns:
        (logp (B, T) float32, entropy (B, T) or None).
    """
    keep = mask.bool()
    states, picks = hidden[keep], targets[keep]  # (N, H), (N,): only the scored positions reach the head
    step = chunk_positions(chunk_tokens, getattr(head, "out_features", None)) or max(len(picks), 1)
    starts = range(0, max(len(picks), 1), step)
    recompute = recompute and len(starts) > 1 and torch.is_grad_enabled() and states.requires_grad
    parts = [
        _chunk_logprobs(head, states[i : i + step], picks[i : i + step], temperature, with_entropy, recompute)
        for i in starts
    ]
    picked = torch.cat([p for p, _ in parts])
    out = torch.zeros(targets.shape, dtype=picked.dtype, device=picked.device).masked_scatter(keep, picked)
    if not with_entropy:
        return out, None
    entropy = torch.zeros_like(out)
    entropy[keep] = torch.cat([e for _, e in parts])
    return out, entropy


def _chunk_logprobs(
    head: torch.nn.Module,
    states: torch.Tensor,
    picks: torch.Tensor,
    temperature: float,
    with_entropy: bool,
    recompute: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(n,) log-probs of `picks` and (n,) entropies (zeros unless asked; no gradient) of one chunk.

    With `recompute` the chunk is checkpointed: its (n, V) logits are freed after the forward
    and recomputed in the backward, so only one chunk's logits are ever alive.
    """
    if recompute:
        out = checkpoint(_head_chunk, head, states, picks, temperature, with_entropy, use_reentrant=False)
        return out  # type: ignore[return-value]
    return _head_chunk(head, states, picks, temperature, with_entropy)


def _head_chunk(
    head: torch.nn.Module, states: torch.Tensor, picks: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    logits = head(states).float()  # (n, V)
    if temperature not in (0, 1):
        logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    picked = logp_all.gather(1, picks[:, None]).squeeze(1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(dim=-1) if with_entropy else torch.zeros_like(picked)
    return picked, entropy


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (B, T) of `input_ids[:, t]` given the tokens before it, where `loss_mask`.

    Column 0 is always 0 (nothing predicts the first token). `position_ids` default to the
    running count of attended tokens, which suits left padding; packed rows pass their own.
    """
    if position_ids is None:
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    hidden = model.get_decoder()(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state
    from tempering.models.checkpointing import checkpointed_now

    logp, entropy = head_logprobs(
        output_head(model),
        hidden[:, :-1],
        input_ids[:, 1:],
        loss_mask[:, 1:],
        temperature,
        with_entropy,
        recompute=checkpointed_now(model),
    )
    pad = logp.new_zeros((logp.shape[0], 1))
    return torch.cat([pad, logp], dim=1), None if entropy is None else torch.cat([pad, entropy], dim=1)


def sequence_logprob_sums(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    loss_mask: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Sum over `loss_mask` of each sequence's token log-probs: log p(response | prompt), (B,).

    What DPO (chosen vs rejected) and reward-model style objectives compare.
    """
    logp, _ = token_logprobs(model, input_ids, attention_mask, loss_mask, position_ids, temperature)
    return logp.sum(dim=1)


def grouped_logprobs(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    pixels: dict[str, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs and entropies (B*G, C) of G completions per prompt.

    `prompt_ids`/`prompt_mask` are (B, P), left-padded, one row per group; completions are
    (B*G, C), right-padded, grouped contiguously. Each prompt runs through the decoder once
    and its KV cache is repeated G times (gradients flow back through the repeat), so the
    prompt costs 1/G of a per-sample forward. Equal to `token_logprobs` over each
    [prompt | completion] row. Masked positions get 0; the entropy carries no gradient.
    `pixels`: image prompts' inputs (`pixel_values`, ...; the prompts' images in row order): the
    prompts run through the vision-language model's backbone, which puts the image features in
    place of the image tokens (as the engine's prefill does).
    """
    from tempering.models.checkpointing import checkpointed_now

    if checkpointed_now(model):  # the prompt's cache would be dropped: run whole rows
        if pixels:
            raise UserError("image prompts under activation checkpointing are not supported yet")
        return _whole_row_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature)
    before = grouped_hidden(model, prompt_ids, prompt_mask, completion_ids, completion_mask, pixels=pixels)
    logp, entropy = head_logprobs(
        _decoder_and_head(model, pixels)[1], before, completion_ids, completion_mask, temperature, with_entropy=True
    )
    return logp, entropy


def _decoder_and_head(model: Any, pixels: dict[str, torch.Tensor] | None) -> tuple[Any, Any]:
    """(decoder, LM head): a VLM's multimodal backbone where the prompts carry images, else the decoder."""
    if pixels:
        from tempering.models.vlm import vlm_backbone

        return vlm_backbone(model)
    return model.get_decoder(), output_head(model)


def _whole_row_logprobs(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`grouped_logprobs` without the shared prompt cache: each [prompt | completion] row runs whole
    (under activation checkpointing, whose layers ignore a cache)."""
    group = completion_ids.shape[0] // prompt_ids.shape[0]
    width = prompt_ids.shape[1]
    ids = torch.cat([prompt_ids.repeat_interleave(group, dim=0), completion_ids], dim=1)
    prompt_mask = prompt_mask.repeat_interleave(group, dim=0)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    loss_mask = torch.cat([torch.zeros_like(prompt_mask), completion_mask], dim=1)
    logp, entropy = token_logprobs(model, ids, mask, loss_mask, temperature=temperature, with_entropy=True)
    assert entropy is not None
    return logp[:, width:], entropy[:, width:]


def grouped_hidden(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    *,
    pixels: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The decoder states (B*G, C, H) that predict each completion token, laid out like
    `grouped_logprobs`'s inputs (the prompt run once per group; whole rows under checkpointing;
    `pixels`: the prompts' images, through a VLM's backbone).
    `before[n, t]` predicts `completion_ids[n, t]`: what a loss over the full next-token
    distribution (on-policy distillation's divergences) projects through the LM head."""
    from transformers import DynamicCache

    from tempering.models.checkpointing import checkpointed_now

    group = completion_ids.shape[0] // prompt_ids.shape[0]
    if checkpointed_now(model):  # the prompt's cache would be dropped: run whole rows
        if pixels:
            raise UserError("image prompts under activation checkpointing are not supported yet")
        width = prompt_ids.shape[1]
        ids = torch.cat([prompt_ids.repeat_interleave(group, dim=0), completion_ids], dim=1)
        mask = torch.cat([prompt_mask.repeat_interleave(group, dim=0), completion_mask], dim=1)
        hidden = model.get_decoder()(
            input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(dim=1) - 1).clamp(min=0), use_cache=False
        ).last_hidden_state
        return hidden[:, width - 1 : -1]
    decoder, cache_kw = _decoder_and_head(model, pixels)[0], cache_keyword(model)
    cache = DynamicCache()
    p_pos = (prompt_mask.cumsum(dim=1) - 1).clamp(min=0)
    p_hidden = decoder(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        position_ids=p_pos,
        use_cache=True,
        **{cache_kw: cache},
        **(pixels or {}),
    ).last_hidden_state[:, -1:]
    if group > 1:
        cache.batch_repeat_interleave(group)
        p_hidden = p_hidden.repeat_interleave(group, dim=0)
        prompt_mask = prompt_mask.repeat_interleave(group, dim=0)
        p_pos = p_pos.repeat_interleave(group, dim=0)
    c_pos = p_pos[:, -1:] + 1 + torch.arange(completion_ids.shape[1], device=completion_ids.device)
    mask = torch.cat([prompt_mask, completion_mask], dim=1)
    c_hidden = decoder(
        input_ids=completion_ids, attention_mask=mask, position_ids=c_pos, use_cache=True, **{cache_kw: cache}
    ).last_hidden_state
    return torch.cat([p_hidden, c_hidden[:, :-1]], dim=1)
