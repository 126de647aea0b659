"""Speculative decoding's verification rule: pure tensor code, checkable against the papers.

Leviathan et al. 2023 ("Fast Inference from Transformers via Speculative Decoding") and
Chen et al. 2023 ("Accelerating LLM Decoding with Speculative Sampling"): a draft proposes
tokens d_1..d_k from distributions q_1..q_k; one target forward gives p_1..p_{k+1}.
Token d_i is accepted with probability min(1, p_i(d_i) / q_i(d_i)), in order; at the first
rejection i the next token is drawn from norm(max(0, p_i - q_i)); when all k are accepted a
bonus token is drawn from p_{k+1}. Every emitted token then has exactly the target's
distribution (the proof is Theorem 1 of Leviathan et al.), whatever the draft.

Greedy is the temperature-0 case: accept while d_i == argmax p_i, then emit argmax p at the
first mismatch (or after the last draft).

Shapes: B rows, k draft positions, V vocabulary. A row may have proposed fewer than k tokens
(`lengths`): positions past its length are rejected and their q is taken as 0, so the
"residual" there is p itself (nothing was proposed, the target samples as it would alone).
A deterministic draft (prompt lookup, greedy drafting) has a one-hot q: pass `draft_probs=None`.
"""

from __future__ import annotations

import torch


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """The distribution a sampler draws from: softmax(logits / T), then the samplers' top-p cut
    (`rollout.engine.top_p_cut`), renormalised. (..., V)."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    from tempering.rollout.engine import top_p_cut

    sorted_p, order, _ = top_p_cut(probs, top_p)
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return kept / kept.sum(dim=-1, keepdim=True)


def _valid(lengths: torch.Tensor, k: int) -> torch.Tensor:
    """(B, k) True where position j < lengths[b]."""
    return torch.arange(k, device=lengths.device)[None, :] < lengths[:, None]


def _leading(accept: torch.Tensor) -> torch.Tensor:
    """(B,) number of leading True values per row of (B, k)."""
    return accept.long().cumprod(dim=1).sum(dim=1)


def verify_greedy(
    target_logits: torch.Tensor, draft_tokens: torch.Tensor, lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification.

    Args:
        target_logits: (B, k+1, V); [:, j] predicts the token after draft position j
            (j = 0: after the last accepted token).
        draft_tokens: (B, k) proposed ids.
        lengths: (B,) how many of the k each row really proposed.
    Returns:
        n_accepted (B,) in 0..lengths, and next_token (B,): the target's argmax at position
        n_accepted (the correction, or the bonus token when all were accepted).
    """
    k = draft_tokens.shape[1]
    best = target_logits.argmax(dim=-1)  # (B, k+1)
    accept = (best[:, :k] == draft_tokens) & _valid(lengths, k)
    n = _leading(accept)
    return n, best.gather(1, n[:, None]).squeeze(1)


def verify_sampled(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    lengths: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rejection-sampling verification (lossless for any draft).

    Args:
        target_probs: (B, k+1, V) the target's sampling distributions p_1..p_{k+1}.
        draft_probs: (B, k, V) the draft's q_1..q_k, or None for a deterministic draft (one-hot q).
        draft_tokens: (B, k) proposed ids.
        lengths: (B,) how many of the k each row really proposed.
        generator: seeds the uniform draws and the residual sample.
    Returns:
        n_accepted (B,) and next_token (B,) drawn from the residual at position n_accepted.
    """
    bsz, k = draft_tokens.shape
    valid = _valid(lengths, k)
    if draft_probs is None:
        q = torch.zeros_like(target_probs[:, :k]).scatter(-1, draft_tokens[..., None], 1.0)
    else:
        q = draft_probs.float()
    q = q * valid[..., None]  # nothing proposed: q = 0, the residual is p
    p_tok = target_probs[:, :k].gather(-1, draft_tokens[..., None]).squeeze(-1)
    q_tok = q.gather(-1, draft_tokens[..., None]).squeeze(-1)
    u = torch.rand((bsz, k), generator=generator, device=target_probs.device)
    # u < p/q written as u * q < p: no division by a zero q (an invalid position is rejected below)
    accept = (u * q_tok < p_tok) & valid
    n = _leading(accept)
    q_ext = torch.cat([q, torch.zeros_like(target_probs[:, :1])], dim=1)  # position k: residual = p_{k+1}
    p_n = target_probs.gather(1, n[:, None, None].expand(-1, 1, target_probs.shape[-1])).squeeze(1)
    q_n = q_ext.gather(1, n[:, None, None].expand(-1, 1, q_ext.shape[-1])).squeeze(1)
    residual = (p_n - q_n).clamp(min=0)
    mass = residual.sum(dim=-1, keepdim=True)
    # p == q exactly leaves no residual mass; then any draw from p is right (it is rejected with prob 0)
    residual = torch.where(mass > 0, residual / mass.clamp(min=1e-30), p_n)
    return n, torch.multinomial(residual, 1, generator=generator).squeeze(1)
