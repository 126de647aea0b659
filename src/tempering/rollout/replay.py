"""Replay a rollout through the trainer: sample with an engine, recompute the sampled tokens'
log-probs the way the GRPO objective does, and measure the gap (`objectives/mismatch.py`).

    figures = replay(engine, model, prompts, SamplingParams(n=4, max_new_tokens=16, seed=0), "fp32")
    figures["max"] <= 1e-5      # fp32: engine and trainer agree to rounding

This is the correctness contract's check outside a run: the suite replays every engine kind
this host has (tests/rollout/test_replay.py), and bench/diagnostics/replay_bf16.py measures
the bf16 bound on the default model (docs/correctness.md).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from tempering.data.padding import PAD_ID, left_pad, right_pad
from tempering.models.logprobs import grouped_logprobs
from tempering.models.precision import autocast
from tempering.objectives.mismatch import mismatch_stats
from tempering.rollout.engine import Engine, ImagePrompt, SamplingParams, prompt_pixels

FP32_EPSILON = 1e-5
"""Largest |log p_train - log p_rollout| the replay allows in fp32 on the suite's tiny models (measured ~5e-7
on every engine kind; the 30-layer default model: mean 9e-6, max 3e-5, docs/correctness.md)."""
BF16_EPSILON = 0.35
"""The same in bf16 (engine and trainer both bf16): the largest gap measured on the default model,
0.31 (batching engine; hf 0.24; mean 0.034, p99 <= 0.18), rounded up; bench/diagnostics/replay_bf16.py,
docs/correctness.md. Per-token bf16 gaps are heavy-tailed: bound the mean in a run's budget."""


def replay(
    engine: Engine, model: Any, prompts: Sequence[Sequence[int]], params: SamplingParams, precision: str
) -> dict[str, float]:
    """The mismatch figures of one sampled batch, plus `max` (the largest gap) and `tokens` (how many).

    Args:
        engine: samples `params.n` completions of each prompt (its own weights and precision).
        model: the trainer's model, which recomputes the log-probs under `precision` autocast.
        prompts: token ids, or `ImagePrompt`s (a vision model's engine): their pixels reach both sides.
        precision: the trainer's resolved precision ("fp32" or "bf16").
    """
    groups = engine.generate([p if isinstance(p, ImagePrompt) else list(p) for p in prompts], params)
    completions = [c for group in groups for c in group]
    prompt_ids, prompt_mask = left_pad(prompts, PAD_ID)
    ids, mask = right_pad([c.token_ids for c in completions], PAD_ID)
    rollout, _ = right_pad([c.logprobs for c in completions], 0.0, width=ids.shape[1], dtype=torch.float32)
    pixels = prompt_pixels(prompts, torch.device("cpu"))
    train = trainer_logprobs(model, prompt_ids, prompt_mask, ids, mask, precision, params.temperature, pixels)
    figures = {k: float(v) for k, v in mismatch_stats(train, rollout, mask).items()}
    gap = (train - rollout).abs()[mask.bool()]
    return {**figures, "max": float(gap.max()) if gap.numel() else 0.0, "tokens": int(gap.numel())}


def trainer_logprobs(
    model: Any,
    prompt_ids: torch.Tensor,  # (P, Tp) left-padded
    prompt_mask: torch.Tensor,
    ids: torch.Tensor,  # (P x n, T) right-padded completions, n per prompt
    mask: torch.Tensor,
    precision: str,
    temperature: float,
    pixels: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """(P x n, T) float32 log-probs of the completions as the trainer computes them (no gradient), on the CPU.
    `pixels`: image prompts' inputs in prompt order (`rollout.engine.prompt_pixels`)."""
    device = next(model.parameters()).device
    moved = {k: v.to(device) for k, v in (pixels or {}).items()}
    with torch.no_grad(), autocast(precision, device):
        logp, _ = grouped_logprobs(
            model,
            prompt_ids.to(device),
            prompt_mask.to(device),
            ids.to(device),
            mask.to(device),
            temperature,
            pixels=moved,
        )
    return logp.float().cpu()
