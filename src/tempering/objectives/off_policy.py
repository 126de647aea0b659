"""Off-policy corrections for the rollout-vs-trainer mismatch: truncated and masked importance sampling.

The engine that sampled a token (vLLM, a bf16 copy, a stale replica) reports log p_rollout; the
trainer's own policy for that rollout is log p_old (the recomputed old log-probs, or the current
ones when mu = 1). Their ratio w = p_old / p_rollout corrects the policy gradient for sampling
from the wrong distribution; w is detached and multiplies the per-token loss.

  mode               ratio                                   weight
  token_truncate     w_t = exp(log p_old - log p_rollout)    min(w_t, cap)                  TIS (Yao et al. 2025, "Your
  sequence_truncate  w = exp(sum_t of the same)             min(w, cap), every token      efficient RL framework secretly
  token_mask         w_t                                     w_t if floor <= w_t <= cap else 0    brings you off-policy RL")
  sequence_mask      w                                       w if floor <= w <= cap else 0, every token   (MIS, IcePop-style)

`floor` (optional) also bounds the truncate modes from below, as TRL's `clip_min`. Tokens the engine
did not sample (agent environment tokens, `sampled` 0) carry ratio 1. The same modes, names and
order of operations as TRL's `vllm_importance_sampling_mode`.
"""

from __future__ import annotations

from typing import Literal

import torch

CorrectionMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


def importance_weights(
    logp_old: torch.Tensor,  # (B, T) the trainer's log-probs of the rollout policy (detached)
    logp_rollout: torch.Tensor,  # (B, T) what the engine reported when it sampled
    sampled: torch.Tensor,  # (B, T) 1 where the engine sampled the token
    mode: CorrectionMode,
    cap: float,
    floor: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(weights (B, T) for token modes or (B, 1) for sequence modes, stats), all detached.

    Stats: `is_ratio_mean` (mean raw ratio over sampled tokens, or over sequences), `is_ratio_max`,
    and `is_corrected_fraction` (share of tokens or sequences truncated or masked).
    """
    with torch.no_grad():
        m = sampled.to(logp_old.dtype)
        diff = torch.nan_to_num((logp_old - logp_rollout) * m, nan=0.0)
        if mode.startswith("sequence"):
            diff, m = diff.sum(dim=1, keepdim=True), (m.sum(dim=1, keepdim=True) > 0).to(m.dtype)
        ratio = torch.exp(diff)
        low = floor if floor is not None else 0.0
        outside = (ratio > cap) | (ratio < low)
        if mode.endswith("truncate"):
            weights = ratio.clamp(min=low, max=cap)
        else:
            weights = ratio.masked_fill(outside, 0.0)
        n = m.sum().clamp(min=1.0)
        stats = {
            "is_ratio_mean": (ratio * m).sum() / n,
            "is_ratio_max": torch.where(m > 0, ratio, torch.zeros_like(ratio)).max(),
            "is_corrected_fraction": (outside.to(m.dtype) * m).sum() / n,
        }
    return weights, stats
