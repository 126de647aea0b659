"""Knowledge distillation: the student matches the teacher's next-token distributions (forward
KL at temperature T, Hinton et al. 2015) and, with weight 1 - kl_weight, the data's tokens
(sequence-level distillation, Kim & Rush 2016, when the data are the teacher's generations).

Normalisation: both terms are *sums* over the assistant target tokens (the positions SFT
trains on); the Trainer divides by the target tokens of the whole optimizer step. The KL is
multiplied by T^2 so its gradients keep their scale as T changes.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from tempering.batches import GRPOBatch, SFTBatch, model_inputs
from tempering.models.logprobs import grouped_hidden, output_head
from tempering.objectives.chunked import by_row_chunks
from tempering.objectives.grpo import GRPOObjective
from tempering.objectives.mismatch import mismatch_stats
from tempering.objectives.sft import count_targets
from tempering.types import IGNORE


def forward_kl_sum(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * sum over rows of KL(softmax(teacher / T) || softmax(student / T)).

    Args:
        student_logits, teacher_logits: (N, V), one row per target position.
    Returns:
        a float32 scalar (computed over row chunks: `objectives/chunked.py`).
    """
    return (
        temperature**2
        * by_row_chunks(functools.partial(_kl_rows, temperature=temperature), student_logits, teacher_logits).sum()
    )


def _kl_rows(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """KL(softmax(teacher / T) || softmax(student / T)) per row: (n, V), (n, V) -> (n,)."""
    t_logp = torch.log_softmax(teacher_logits.float() / temperature, dim=-1)
    s_logp = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    return (t_logp.exp() * (t_logp - s_logp)).sum(dim=-1)


def _kl_ce_rows(
    student: torch.Tensor, teacher: torch.Tensor, targets: torch.Tensor, temperature: float
) -> torch.Tensor:
    """(n, 2): per row, the KL at temperature T and the cross-entropy of the data's token (at 1)."""
    ce = torch.nn.functional.cross_entropy(student.float(), targets, reduction="none")
    return torch.stack([_kl_rows(student, teacher, temperature), ce], dim=1)


def distill_loss_sum(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    kl_weight: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """kl_weight * forward KL sum + (1 - kl_weight) * cross-entropy sum over N target rows.

    Args:
        student_logits, teacher_logits: (N, V); targets: (N,) the data's next tokens.
    Returns:
        (loss sum, {"kl": per-token KL, "ce": per-token cross-entropy}) for logging.
    """
    rows = functools.partial(_kl_ce_rows, temperature=temperature)
    kl, ce = by_row_chunks(rows, student_logits, teacher_logits, targets).sum(dim=0).unbind()
    kl = temperature**2 * kl
    n = max(targets.numel(), 1)
    return kl_weight * kl + (1 - kl_weight) * ce, {"kl": float(kl.detach()) / n, "ce": float(ce.detach()) / n}


class DistillObjective:
    """Student vs teacher on the assistant tokens of SFT batches; plugs into the Trainer.

    The teacher runs without gradients on the same batch; only the target positions reach
    either LM head (49k-wide logits for every position would dominate memory)."""

    name = "distill"

    def __init__(self, teacher: Any, temperature: float = 1.0, kl_weight: float = 1.0):
        self.teacher = teacher.eval().requires_grad_(False)
        self.temperature, self.kl_weight = temperature, kl_weight

    def units(self, batch: SFTBatch) -> int:
        return count_targets(batch)

    def _logits(self, model: Any, inputs: dict[str, Any], keep: torch.Tensor) -> torch.Tensor:
        hidden = model.get_decoder()(**inputs, use_cache=False).last_hidden_state[:, :-1]
        return output_head(model)(hidden[keep])

    def loss(self, model: Any, batch: SFTBatch) -> tuple[torch.Tensor, dict[str, float]]:
        inputs = model_inputs(batch)
        targets = batch["labels"][:, 1:]
        keep = targets != IGNORE
        with torch.no_grad():
            teacher_logits = self._logits(self.teacher, inputs, keep)
        student_logits = self._logits(model, inputs, keep)
        return distill_loss_sum(student_logits, teacher_logits, targets[keep], self.temperature, self.kl_weight)


def reverse_kl_advantages(
    student_logp: torch.Tensor,  # (N, T) log p_student of the student's sampled tokens (the sampler's)
    teacher_logp: torch.Tensor,  # (N, T) log p_teacher of the same tokens
    mask: torch.Tensor,  # (N, T) 1 on sampled tokens
) -> tuple[torch.Tensor, torch.Tensor]:
    """On-policy distillation's per-token advantages: minus the reverse-KL estimate, 0 off `mask`.

    With y_t sampled from the student, log p_s(y_t) - log p_t(y_t) is an unbiased one-sample
    estimate of KL(p_s || p_t) at that position (Agarwal et al. 2024, GKD; Thinking Machines'
    "On-Policy Distillation", 2025). Its negative as the advantage of a policy-gradient step
    (no discounting: each token is credited with its own term) moves the student towards the
    tokens the teacher finds likelier than the student does.

    Returns:
        (advantages (N, T) float32, reverse KL per sampled token: the mean of the estimates).
    """
    m = mask.to(torch.float32)
    per_token = (student_logp.float() - teacher_logp.float()) * m
    return -per_token, per_token.sum() / m.sum().clamp(min=1.0)


class OnPolicyDistillObjective(GRPOObjective):
    """On-policy distillation in the Trainer: the policy-gradient loss of `GRPOObjective` over
    batches whose per-token advantages are `reverse_kl_advantages` (built by the batch source).
    With one update per batch and no reference the ratio is 1, so the loss is
    -sum_t A_t log p_student(y_t) over the sampled tokens (token mean), and each step also logs
    the sampler-vs-trainer mismatch figures."""

    name = "distill-on-policy"


class OnPolicyDivergenceObjective:
    """On-policy distillation over whole distributions: at every position of the student's own
    samples (a `GRPOBatch` from `OnPolicyDistillSource`), the registered divergence
    (`objectives/divergences.py`) between the student's and the teacher's next-token
    distributions, summed over the scored tokens (the Trainer divides by them: a token mean).

    The prefixes are the student's (on-policy, Agarwal et al. 2024); the target is the teacher's
    whole distribution there, so no advantage and no sampling variance per token (the
    policy-gradient path, `OnPolicyDistillObjective`, sees one sampled token per position). A batch
    of the teacher's greedy replies (GKD's 1 - lambda steps: no sampled token is the student's)
    takes `teacher_divergence` instead when one is given, e.g. forward KL there, which keeps
    the mass the teacher puts on its path (its end token included) that reverse KL's zero-forcing
    lets the student drop; `teacher_kl_weight` < 1 mixes cross-entropy on those replies' tokens into
    them (the forward recipe's `kl_weight`). Logged:
    `reverse_kl` (the mean one-sample estimate log p_s(y) - log p_t(y) on the sampled tokens, the
    figure the policy-gradient path logs; at the divergence's temperature; on steps of the student's
    own samples only), `divergence` (the loss per token) and the sampler-vs-
    trainer mismatch figures."""

    name = "distill-on-policy"

    def __init__(
        self,
        teacher: Any,
        divergence: str,
        settings: dict[str, float] | None,
        temperature: float,
        plugins: list[str],
        sampling_temperature: float | None = None,
        teacher_divergence: str | None = None,
        teacher_kl_weight: float = 1.0,
    ):
        from tempering import algorithms

        self.teacher = teacher.eval().requires_grad_(False)
        teacher_divergence = divergence if teacher_divergence is None else teacher_divergence

        def bound(name: str) -> Any:  # each divergence receives the settings it takes (its keyword-only parameters)
            fn = algorithms.lookup("divergence", name, plugins).fn
            takes = algorithms.keyword_settings(fn)
            return functools.partial(fn, **{k: v for k, v in (settings or {}).items() if k in takes})

        self.divergence = bound(divergence)
        self.teacher_divergence = bound(teacher_divergence)  # on the teacher's replies (GKD's 1 - lambda steps)
        self.teacher_kl_weight = teacher_kl_weight
        self.temperature = temperature
        self.sampling_temperature = temperature if sampling_temperature is None else sampling_temperature

    def units(self, batch: GRPOBatch) -> float:
        return float(batch.loss_mask.sum())

    def _rows(
        self, logits: torch.Tensor, teacher_logits: torch.Tensor, picks: torch.Tensor, on_own: bool
    ) -> torch.Tensor:
        """(n, 3) for n scored rows: the loss term (the divergence; on the teacher's greedy replies its
        own divergence, mixed with cross-entropy on its tokens), the sampler's log-prob of the picked
        token and log p_s - log p_t of it (both without gradient)."""
        student = torch.log_softmax(logits / self.temperature, dim=-1)
        teacher = torch.log_softmax(teacher_logits / self.temperature, dim=-1)
        if on_own:
            per_row = self.divergence(student, teacher)
        else:  # the teacher's greedy replies: its divergence, and cross-entropy on its tokens for the rest
            per_row = self.teacher_divergence(student, teacher)
            if self.teacher_kl_weight < 1:
                ce = torch.nn.functional.cross_entropy(logits, picks, reduction="none")
                per_row = self.teacher_kl_weight * per_row + (1 - self.teacher_kl_weight) * ce
        with torch.no_grad():
            sampler = student
            if self.sampling_temperature != self.temperature:  # the mismatch compares the sampler's own figures
                sampler = torch.log_softmax(logits / self.sampling_temperature, dim=-1)
            pick = picks[:, None]
            picked = sampler.gather(1, pick).squeeze(1)
            estimate = (student.gather(1, pick) - teacher.gather(1, pick)).squeeze(1)
        return torch.stack([per_row, picked, estimate], dim=1)

    def _logits(self, model: Any, batch: GRPOBatch, keep: torch.Tensor) -> torch.Tensor:
        args = (batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask)
        states = grouped_hidden(model, *args)[keep]  # (n, H): only the scored positions reach the head
        return output_head(model)(states).float()

    def loss(self, model: Any, batch: GRPOBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        keep = batch.loss_mask.bool()
        own = batch.sampled_mask.bool()[keep]  # the student's samples (not a teacher step's replies)
        with torch.no_grad():
            teacher = self._logits(self.teacher, batch, keep)
        logits = self._logits(model, batch, keep)
        picks = batch.completion_ids[keep]
        # per row: the loss term, the sampler's log-prob of the pick, the one-sample reverse-KL estimate;
        # over row chunks, so no (N, V) log-softmax lives whole (`objectives/chunked.py`)
        rows = by_row_chunks(functools.partial(self._rows, on_own=bool(own.any())), logits, teacher, picks)
        per_row, picked, estimate = rows.unbind(dim=1)
        logp = torch.zeros(keep.shape, dtype=picked.dtype, device=picked.device).masked_scatter(keep, picked)
        stats = {
            "divergence": per_row.detach().sum() / keep.sum().clamp(min=1),
            **mismatch_stats(logp, batch.engine_logprobs, batch.sampled_mask),
        }
        if bool(own.any()):
            stats["reverse_kl"] = estimate[own].sum() / own.sum()
        return per_row.sum(), stats
