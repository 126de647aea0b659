"""Preference losses over per-sequence log-probs, registered by name (`tempering.algorithms`).

Pure tensor math, checkable against the papers (and against TRL in the tests). Every registered
loss takes a `PairLogps` of per-pair tensors, each (B,), and returns (loss per pair, chosen reward,
rejected reward), all (B,); the caller weights and sums the losses (the Trainer divides by the
pairs of the optimizer step, so with unit weights the step loss is the mean over pairs, as in TRL).

Inputs, per pair:
  policy_chosen / policy_rejected   log pi(y | x), summed over the answer's scored tokens
  ref_chosen / ref_rejected         the same under the reference policy (None: reference-free losses)
  chosen_len / rejected_len         scored tokens per answer (for averages)

  dpo    (Rafailov et al. 2023)   d = (pc - rc) - (pr - rr)
         loss = -(1 - eps) log s(beta d) - eps log s(-beta d)
         eps = label_smoothing > 0 is conservative DPO (cDPO: labels flipped with prob. eps).
  ipo    (Azar et al. 2023, Eq. 17)  the log-ratios averaged over each answer's tokens (as
         TRL does, confirmed with the IPO authors): d = (pc - rc)/Lc - (pr - rr)/Lr,
         loss = (d - 1/(2 beta))^2
  simpo  (Meng et al. 2024)       reference-free, length-normalised:
         m = beta (pc/Lc - pr/Lr) - gamma,  loss = -(1 - eps) log s(m) - eps log s(-m)
  kto    (Ethayarajh et al. 2024, Eq. 7)  each pair is one desirable and one undesirable answer:
         z0 = max(0, mean over the batch's answers of (p - r)), detached;
         loss = (1 - s(beta (pc - rc - z0)) + 1 - s(beta (z0 - (pr - rr)))) / 2
         (TRL estimates z0 on mismatched prompt/answer pairs of unpaired data; on pairs the
         batch's own answers stand in, with no extra forward pass: `kto_reference_point`)
  orpo   (Hong et al. 2024)       reference-free on per-token average log-probs a = p / L:
         log odds(y) = a - log(1 - exp(a));  loss = -a_c - beta log s(log odds(c) - log odds(r))
         (the NLL of the chosen answer per token plus lambda = beta times the odds-ratio term)
  SFT    (RPO, Pang et al. 2024)  alpha * (-pc / Lc): NLL of the chosen answer per token,
         added to any of the above (`sft_weight`).

Rewards for metrics are the implicit ones, beta * log-ratio (SimPO, ORPO: beta * average log-prob).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tempering import algorithms
from tempering.algorithms import register_preference_loss


@dataclass(frozen=True)
class PairLogps:
    """Per-pair sequence log-probs and answer lengths, each (B,)."""

    policy_chosen: torch.Tensor
    policy_rejected: torch.Tensor
    ref_chosen: torch.Tensor | None
    ref_rejected: torch.Tensor | None
    chosen_len: torch.Tensor
    rejected_len: torch.Tensor

    def reference(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(ref_chosen, ref_rejected); a reference-based loss calls this."""
        if self.ref_chosen is None or self.ref_rejected is None:
            raise ValueError("this preference loss needs reference log-probs")
        return self.ref_chosen, self.ref_rejected


def needs_reference(loss: str, plugins: tuple[str, ...] | list[str] = ()) -> bool:
    """Whether the registered preference loss `loss` reads reference log-probs."""
    return bool(algorithms.lookup("preference_loss", loss, plugins).options["reference"])


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """DPO sigmoid loss per pair (B,); `label_smoothing` > 0 gives cDPO."""
    delta = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)
    return -(1 - label_smoothing) * F.logsigmoid(beta * delta) - label_smoothing * F.logsigmoid(-beta * delta)


def ipo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    chosen_len: torch.Tensor,
    rejected_len: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """IPO squared loss per pair (B,) on per-token log-ratios; beta is IPO's tau."""
    delta = (policy_chosen - ref_chosen) / chosen_len.clamp(min=1) - (
        policy_rejected - ref_rejected
    ) / rejected_len.clamp(min=1)
    return (delta - 1 / (2 * beta)) ** 2


def simpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    chosen_len: torch.Tensor,
    rejected_len: torch.Tensor,
    beta: float,
    gamma: float,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """SimPO loss per pair (B,): reference-free, length-normalised, target margin `gamma`."""
    margin = beta * (policy_chosen / chosen_len.clamp(min=1) - policy_rejected / rejected_len.clamp(min=1)) - gamma
    return -(1 - label_smoothing) * F.logsigmoid(margin) - label_smoothing * F.logsigmoid(-margin)


def sft_term(policy_chosen: torch.Tensor, chosen_len: torch.Tensor) -> torch.Tensor:
    """Per-token NLL of the chosen answer per pair (B,) (RPO's added term)."""
    return -policy_chosen / chosen_len.clamp(min=1)


def odds_ratio_term(chosen_avg: torch.Tensor, rejected_avg: torch.Tensor, beta: float) -> torch.Tensor:
    """ORPO's odds-ratio loss per pair (B,): -beta log s(log odds(c) - log odds(r)) on average log-probs."""
    log_odds = (chosen_avg - rejected_avg) - (log1mexp(chosen_avg) - log1mexp(rejected_avg))
    return -beta * F.logsigmoid(log_odds)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, stable on both sides of -log 2 (Maechler 2012)."""
    return torch.where(x > -0.6931471805599453, torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def kto_reference_point(pairs: PairLogps) -> torch.Tensor:
    """KTO's z0 on a pair batch: the mean policy/reference log-ratio of every answer, >= 0, detached."""
    ref_chosen, ref_rejected = pairs.reference()
    ratios = torch.cat([pairs.policy_chosen - ref_chosen, pairs.policy_rejected - ref_rejected])
    return ratios.mean().detach().clamp(min=0)


def kto_pair_loss(
    chosen_logratio: torch.Tensor, rejected_logratio: torch.Tensor, z0: torch.Tensor, beta: float
) -> torch.Tensor:
    """KTO per pair (B,): the mean of the desirable and the undesirable answer's value losses (unit weights)."""
    desirable = 1 - torch.sigmoid(beta * (chosen_logratio - z0))
    undesirable = 1 - torch.sigmoid(beta * (z0 - rejected_logratio))
    return (desirable + undesirable) / 2


def _implicit_rewards(pairs: PairLogps, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    ref_chosen, ref_rejected = pairs.reference()
    return beta * (pairs.policy_chosen - ref_chosen).detach(), beta * (pairs.policy_rejected - ref_rejected).detach()


def _average_rewards(pairs: PairLogps, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    chosen = pairs.policy_chosen.detach() / pairs.chosen_len.clamp(min=1)
    return beta * chosen, beta * pairs.policy_rejected.detach() / pairs.rejected_len.clamp(min=1)


Terms = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@register_preference_loss("dpo")
def dpo(pairs: PairLogps, *, beta: float, label_smoothing: float = 0.0, gamma: float = 0.0) -> Terms:
    """Sigmoid DPO on the log-ratio margin; label_smoothing > 0 is cDPO."""
    ref_chosen, ref_rejected = pairs.reference()
    losses = dpo_loss(pairs.policy_chosen, pairs.policy_rejected, ref_chosen, ref_rejected, beta, label_smoothing)
    return losses, *_implicit_rewards(pairs, beta)


@register_preference_loss("ipo")
def ipo(pairs: PairLogps, *, beta: float, label_smoothing: float = 0.0, gamma: float = 0.0) -> Terms:
    """IPO: squared distance of the per-token log-ratio margin to 1 / (2 tau)."""
    ref_chosen, ref_rejected = pairs.reference()
    losses = ipo_loss(
        pairs.policy_chosen, pairs.policy_rejected, ref_chosen, ref_rejected, pairs.chosen_len, pairs.rejected_len, beta
    )
    return losses, *_implicit_rewards(pairs, beta)


@register_preference_loss("simpo", reference=False)
def simpo(pairs: PairLogps, *, beta: float, label_smoothing: float = 0.0, gamma: float = 0.0) -> Terms:
    """SimPO: reference-free, length-normalised, target margin gamma."""
    losses = simpo_loss(
        pairs.policy_chosen, pairs.policy_rejected, pairs.chosen_len, pairs.rejected_len, beta, gamma, label_smoothing
    )
    return losses, *_average_rewards(pairs, beta)


@register_preference_loss("kto")
def kto(pairs: PairLogps, *, beta: float, label_smoothing: float = 0.0, gamma: float = 0.0) -> Terms:
    """KTO on pairs: chosen desirable, rejected undesirable, against the reference point z0."""
    ref_chosen, ref_rejected = pairs.reference()
    z0 = kto_reference_point(pairs)
    losses = kto_pair_loss(pairs.policy_chosen - ref_chosen, pairs.policy_rejected - ref_rejected, z0, beta)
    return losses, *_implicit_rewards(pairs, beta)


@register_preference_loss("orpo", reference=False)
def orpo(pairs: PairLogps, *, beta: float, label_smoothing: float = 0.0, gamma: float = 0.0) -> Terms:
    """ORPO: per-token NLL of the chosen answer plus beta times the odds-ratio loss (reference-free)."""
    chosen_avg = pairs.policy_chosen / pairs.chosen_len.clamp(min=1)
    rejected_avg = pairs.policy_rejected / pairs.rejected_len.clamp(min=1)
    losses = -chosen_avg + odds_ratio_term(chosen_avg, rejected_avg, beta)
    return losses, *_average_rewards(pairs, beta)


def preference_losses(
    loss_type: str,
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor | None,
    ref_rejected: torch.Tensor | None,
    chosen_len: torch.Tensor,
    rejected_len: torch.Tensor,
    *,
    beta: float,
    label_smoothing: float = 0.0,
    gamma: float = 0.0,
    sft_weight: float = 0.0,
    plugins: tuple[str, ...] | list[str] = (),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss per pair, chosen reward, rejected reward), all (B,), by the registered loss `loss_type`;
    rewards carry no gradient.

    Raises:
        ValueError: a reference-based loss without reference log-probs, or an unknown loss.
    """
    fn = algorithms.lookup("preference_loss", loss_type, plugins).fn
    pairs = PairLogps(policy_chosen, policy_rejected, ref_chosen, ref_rejected, chosen_len, rejected_len)
    losses, chosen_reward, rejected_reward = fn(pairs, beta=beta, label_smoothing=label_smoothing, gamma=gamma)
    if sft_weight:
        losses = losses + sft_weight * sft_term(policy_chosen, chosen_len)
    return losses, chosen_reward, rejected_reward
