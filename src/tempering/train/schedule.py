"""Learning-rate schedule as a pure function of the step (nothing to checkpoint but the step)."""

from __future__ import annotations

import math

from tempering.config import OptimSettings


def lr_at(step: int, total: int, opt: OptimSettings, scale: float = 1.0) -> float:
    """LR for optimizer step `step` (0-based) of `total`: linear warmup, then decay.

    Warmup goes linearly from lr/warmup to lr over `warmup_steps`; decay (cosine or
    linear) would reach lr * min_lr_ratio at step `total`, one past the last step taken, so
    the last update still moves the weights (with min_lr_ratio 0 an lr-0 last step is a
    wasted forward/backward). `scale` is the guard's rollback multiplier.
    """
    peak = opt.lr * scale
    if step < opt.warmup_steps:
        return peak * (step + 1) / opt.warmup_steps
    span = max(1, total - opt.warmup_steps)
    progress = min(1.0, (step - opt.warmup_steps) / span)
    if opt.schedule == "constant":
        factor = 1.0
    elif opt.schedule == "linear":
        factor = 1.0 - progress
    else:
        factor = 0.5 * (1.0 + math.cos(math.pi * progress))
    return peak * (opt.min_lr_ratio + (1.0 - opt.min_lr_ratio) * factor)
