"""Train-vs-rollout mismatch on the sampled tokens, as pure tensor code.

The rollout engine reports log p_rollout(y_t) of each token it sampled; the trainer
recomputes log p_train(y_t) with the same weights. They should agree to rounding: a gap
means the policy gradient is computed for a policy other than the one that sampled
("off-policy by accident": a stale or wrong weight sync, another precision, another kernel).

Three figures, each over the tokens where the engine sampled (`sampled` 1):

  logprob_mismatch       mean |log p_train - log p_rollout|
  logprob_mismatch_p99   99th percentile of the same
  mismatch_kl            KL(p_rollout || p_train) estimated on the rollout's own samples with
                         Schulman's k3: E[r - 1 - log r], r = p_train / p_rollout (>= 0 per token)

The names are what every GRPO and agent step logs and what `mismatch_budget` may bound.
"""

from __future__ import annotations

import torch

from tempering.config import MISMATCH_METRICS


def mismatch_stats(
    logp_train: torch.Tensor,  # (B, T) trainer log-probs of the sampled tokens
    logp_rollout: torch.Tensor,  # (B, T) the engine's log-probs of the same tokens
    sampled: torch.Tensor,  # (B, T) 1 where the engine sampled (elsewhere the engine figure is a placeholder)
) -> dict[str, torch.Tensor]:
    """The three mismatch figures as 0-dim tensors (0 when nothing was sampled); no gradient."""
    with torch.no_grad():
        keep = sampled.bool()
        diff = (logp_train.detach().float() - logp_rollout.float())[keep]
        if diff.numel() == 0:
            zero = torch.zeros((), device=logp_train.device)
            return dict.fromkeys(MISMATCH_METRICS, zero)
        gap = diff.abs()
        return {
            "logprob_mismatch": gap.mean(),
            "logprob_mismatch_p99": torch.quantile(gap, 0.99),
            "mismatch_kl": (torch.exp(diff) - 1.0 - diff).mean(),
        }
