"""On-policy distillation's `BatchSource`: the student samples through the rollout path, the
teacher scores the sampled tokens, and each token's advantage is minus its reverse-KL estimate
(`objectives.distill.reverse_kl_advantages`). The batches are `GRPOBatch`es built by the one
GRPO batch builder, so the policy-gradient objective (`objectives.grpo.GRPOObjective`) trains on
them in the one Trainer, and every step logs the train-vs-rollout mismatch figures like GRPO's.

The teacher is a `TeacherScorer`: a callable from a batch to its (N, T) log-probs. In this
process it is `PolicyLogprobs` over the teacher model (no gradient, eval mode); anything that
answers the same call (a model on another device or in another process) can stand in. Under a
divergence over whole distributions (`rollout.divergence`) the teacher is None here: the objective
(`OnPolicyDivergenceObjective`) takes the teacher's logits itself and the advantages stay 0.

With `rollout.student_fraction` f < 1 (GKD's lambda, Agarwal et al. 2024; TRL's `GKDTrainer.lmbda`)
a share 1 - f of the steps, spread evenly, learn on the teacher's greedy replies (`teacher_engine`)
to as many prompts instead of the student's samples: the divergence then covers the states the
teacher visits too. Those rows are not the student's samples, so their `sampled_mask` is 0 and
the mismatch figures skip them.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import replace
from typing import Any, Callable

import torch

from tempering.batches import GRPOBatch
from tempering.config import SamplingSettings
from tempering.config.distill import OnPolicySettings
from tempering.errors import UserError
from tempering.objectives.distill import reverse_kl_advantages
from tempering.rollout.engine import Engine
from tempering.rollout.grpo_batches import GroupRows, grpo_micro_batches, served_versions
from tempering.rollout.rollout import RewardWorkers, ThreadRewardWorkers, rollout
from tempering.rollout.roundtrip import roundtrip_ok
from tempering.types import Task
from tempering.versions import NOT_SAMPLED, Version, VersionClock, stamp

TeacherScorer = Callable[[GRPOBatch], torch.Tensor]
"""batch -> (N, T) teacher log-probs of `batch.completion_ids` (0 off the completion mask)."""


class OnPolicyDistillSource:
    """Student samples -> teacher log-probs -> per-token advantages -> GRPO micro-batches."""

    def __init__(
        self,
        tasks: list[Task],
        engine: Engine,
        settings: OnPolicySettings,
        teacher: TeacherScorer | None,
        grad_accum: int,
        seed: int,
        model: Any = None,
        workers: RewardWorkers | None = None,
        tokenizer: Any = None,
        teacher_engine: Engine | None = None,
    ):
        if not tasks:
            raise UserError("on-policy distillation needs at least one prompt")
        self.tasks, self.engine, self.s, self.teacher = tasks, engine, settings, teacher
        self.grad_accum, self.seed, self.model, self.tokenizer = grad_accum, seed, model, tokenizer
        self.workers = workers if workers is not None else ThreadRewardWorkers(1)
        self.order = list(range(len(tasks)))
        random.Random(seed).shuffle(self.order)
        self.cursor, self.batches = 0, 0
        self.teacher_engine = teacher_engine  # GKD's mixture: some steps learn on the teacher's replies
        self.buffer: list[GRPOBatch] = []
        self._stats: dict[str, float] = {}
        self.clock = VersionClock()  # the student's weights version: stamps samples, measures staleness

    # -- BatchSource -------------------------------------------------------------------
    def next_batch(self) -> GRPOBatch:
        if not self.buffer:
            self.buffer = self._batch()
        batch = self.buffer.pop(0)
        self.clock.served(served_versions(batch))
        return batch

    def on_weights(self, version: Version, step: int) -> None:
        """The student's weights changed (or were restored): samples drawn from now on are `version`'s."""
        self.clock.on_weights(version, step)

    @property
    def at_boundary(self) -> bool:
        return not self.buffer

    def state_dict(self) -> dict:
        return {"cursor": self.cursor, "batches": self.batches}

    def load_state_dict(self, state: dict) -> None:
        self.cursor, self.batches, self.buffer = state["cursor"], state.get("batches", 0), []

    def stats(self) -> dict[str, float]:
        return dict(self._stats) | self.clock.metrics()

    def close(self) -> None:
        self.workers.close()

    # -- one batch -------------------------------------------------------------------------
    def _next_tasks(self, n: int) -> list[Task]:
        out = [self.tasks[self.order[(self.cursor + i) % len(self.order)]] for i in range(n)]
        self.cursor += n
        return out

    def _batch(self) -> list[GRPOBatch]:
        if self.model is not None:
            self.engine.sync_weights(self.model)
        f, k = self.s.student_fraction, self.batches
        student = self.teacher_engine is None or math.ceil((k + 1) * f) > math.ceil(k * f)  # f of the steps
        self.batches += 1
        t0 = time.perf_counter()
        if student:
            tasks = self._next_tasks(self.s.prompts_per_step)
            groups = rollout(
                tasks, self.engine, self.s, self.workers, n=self.s.samples_per_prompt, seed=self.seed + self.cursor
            )
        else:  # as many replies, one greedy teacher reply per prompt; not the student's samples
            assert self.teacher_engine is not None
            tasks = self._next_tasks(self.s.prompts_per_step * self.s.samples_per_prompt)
            fields = {k: getattr(self.s, k) for k in SamplingSettings.model_fields}
            greedy = SamplingSettings.model_validate({**fields, "temperature": 0.0})
            groups = rollout(tasks, self.teacher_engine, greedy, self.workers, n=1, seed=self.seed + self.cursor)
        gen_s, t1 = time.perf_counter() - t0, time.perf_counter()
        rows = []
        for t in (t for trajs in groups for t in trajs):  # the teacher's replies are no policy's samples
            t.versions = stamp(t.loss_mask, self.clock.version) if student else [NOT_SAMPLED] * len(t.token_ids)
        for trajs in groups:
            first = trajs[0]
            masks = [[1] * len(t.completion_ids) for t in trajs]
            sampled = masks if student else [[0] * len(m) for m in masks]  # the mismatch is the student's own
            zeros = torch.zeros((len(trajs), max(1, max(len(t.completion_ids) for t in trajs))))
            rows.append(GroupRows(first.token_ids[: first.prompt_length], trajs, masks, sampled, zeros))
        micro = grpo_micro_batches(rows, self.grad_accum)
        kls, counts = [], []
        for i, batch in enumerate(micro):
            if batch.n_real_tokens == 0 or self.teacher is None:  # a filler, or the objective asks the teacher
                continue
            teacher = self.teacher(batch)
            advantages, kl = reverse_kl_advantages(batch.engine_logprobs, teacher, batch.sampled_mask)
            micro[i] = replace(batch, advantages=advantages)
            kls.append(float(kl))
            counts.append(int(batch.sampled_mask.sum()))
        samples = [t for trajs in groups for t in trajs]
        self._stats = {
            **({"reverse_kl": sum(k * c for k, c in zip(kls, counts)) / max(1, sum(counts))} if kls else {}),
            "accuracy": sum(t.reward.passed for t in samples) / len(samples),
            "response_len": sum(len(t.completion_ids) for t in samples) / len(samples),
            "truncation_rate": sum(t.truncated for t in samples) / len(samples),
            "completions": len(samples),
            "student_samples": float(student),
            "gen_s": gen_s,
            "teacher_s": time.perf_counter() - t1,
        }
        if self.tokenizer is not None:
            bad = sum(not roundtrip_ok(self.tokenizer, t.completion_ids) for t in samples)
            self._stats["roundtrip_mismatch_rate"] = bad / len(samples)
        return micro


def reverse_kl_to_teacher(
    engine: Engine, student: Any, teacher: Any, prompts: list[list[int]], params: Any, precision: str
) -> dict[str, Any]:
    """KL(student || teacher) on the student's own samples of `prompts`: per token and per reply.

    The student samples through `engine`; both models' next-token distributions at the sampled
    positions are recomputed by the trainer's forward (`models.logprobs.grouped_hidden`, the path
    the on-policy objective trains through), so the figures do not depend on the engine's numerics:
    the exact KL over the whole vocabulary and its one-sample estimate log p_s(y) - log p_t(y).
    `replies` holds, per sampled reply (prompt-major, `params.n` per prompt), its token count and
    its sums of both, for intervals over prompts.
    """
    from tempering.data.padding import PAD_ID, left_pad, right_pad

    groups = engine.generate(prompts, params)
    completions = [c for group in groups for c in group]
    ids, mask = right_pad([c.token_ids for c in completions], PAD_ID)
    prompt_ids, prompt_mask = left_pad(prompts, PAD_ID)
    temperature = params.temperature or 1.0
    g = len(completions) // max(len(prompts), 1)
    parts = [  # one prompt's replies at a time: (tokens, V) logits for all of them would not fit
        _reply_kls(student, teacher, prompt_ids[i : i + 1], prompt_mask[i : i + 1], *rows, precision, temperature)
        for i in range(len(prompts))
        for rows in [(ids[i * g : (i + 1) * g], mask[i * g : (i + 1) * g])]
    ]
    exact, one_sample = (torch.cat([part[j] for part in parts]) for j in (0, 1))
    tokens = max(int(mask.sum()), 1)
    return {
        "reverse_kl_per_token": float(one_sample.sum()) / tokens,
        "reverse_kl_per_reply": float(one_sample.mean()),
        "reverse_kl_exact_per_token": float(exact.sum()) / tokens,
        "tokens": int(mask.sum()),
        "replies": {
            "tokens": [int(n) for n in mask.sum(dim=1)],
            "one_sample": [float(x) for x in one_sample],
            "exact": [float(x) for x in exact],
        },
    }


@torch.no_grad()
def _reply_kls(
    student: Any,
    teacher: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    ids: torch.Tensor,
    mask: torch.Tensor,
    precision: str,
    temperature: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(student || teacher) at each sampled position, summed per reply: over the whole vocabulary
    (the expectation the one-sample figure estimates, without its sampling noise; same prefixes),
    and the one-sample estimate log p_s(y) - log p_t(y) of the sampled token y.

    Args:
        prompt_ids, prompt_mask: (B, P); ids, mask: (B*G, C), G replies per prompt.
    Returns:
        (exact, one_sample), each (B*G,) float32 sums over each reply's sampled positions.
    """
    from tempering.models.logprobs import grouped_hidden, output_head
    from tempering.models.precision import autocast
    from tempering.objectives.divergences import reverse_kl

    keep = mask.bool()
    logps = []
    for m in (student, teacher):
        device = next(m.parameters()).device
        with autocast(precision, device):
            args = (a.to(device) for a in (prompt_ids, prompt_mask, ids, mask))
            states = grouped_hidden(m, *args)[keep.to(device)]  # (tokens, H): only sampled positions
            logits = output_head(m)(states).float().cpu()
        logps.append(torch.log_softmax(logits / temperature, dim=-1))
    picked = ids[keep][:, None]
    exact, one_sample = torch.zeros(mask.shape), torch.zeros(mask.shape)
    exact[keep] = reverse_kl(logps[0], logps[1]).float()
    one_sample[keep] = (logps[0].gather(1, picked) - logps[1].gather(1, picked)).squeeze(1)
    return exact.sum(dim=1), one_sample.sum(dim=1)
