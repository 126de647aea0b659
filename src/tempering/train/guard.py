"""Anomaly guard: decide whether a step's update is applied, skipped, or rolled back.

Pure bookkeeping (no torch): the Trainer reports each step's loss and gradient norm and
acts on the verdict. A step is bad when its loss or gradient norm is not finite, or its
loss exceeds `spike_factor` x the running mean of recent good losses (once `min_history`
good steps exist). `max_bad_in_row` bad steps in a row ask for a rollback.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from tempering.config import GuardSettings


@dataclass
class AnomalyGuard:
    settings: GuardSettings
    recent: deque = field(default_factory=lambda: deque(maxlen=50))
    bad_in_row: int = 0
    counts: Counter = field(default_factory=Counter)

    def check(self, loss: float, grad_norm: float | None, spikes: bool = True) -> str | None:
        """The reason this step is bad, or None when it is good.

        Loss spikes are judged only when `spikes` (the objective's loss is a positive
        likelihood-type loss, as SFT's) and the running mean is positive: a policy-gradient
        loss sits near 0 and changes sign, so "5x the mean" means nothing there.
        """
        if not self.settings.enabled:
            return None
        if not math.isfinite(loss):
            return "nonfinite_loss"
        if grad_norm is not None and not math.isfinite(grad_norm):
            return "nonfinite_grad"
        if spikes and len(self.recent) >= self.settings.min_history:
            mean = sum(self.recent) / len(self.recent)
            if mean > 0 and loss > self.settings.spike_factor * mean:
                return "loss_spike"
        return None

    def record_good(self, loss: float) -> None:
        self.recent.append(loss)
        self.bad_in_row = 0

    def record_bad(self, reason: str) -> bool:
        """Count a skipped step; True when it is time to roll back."""
        self.counts[reason] += 1
        self.counts["skipped"] += 1
        self.bad_in_row += 1
        return self.bad_in_row >= self.settings.max_bad_in_row

    def record_rollback(self, recent: list[float]) -> None:
        """The weights went back to a checkpoint: so does the loss history spikes are judged
        against (`recent`, the checkpoint's). Judged against the later, lower losses, every step
        from an early checkpoint would look like a spike and the run would die of rollbacks."""
        self.counts["rollbacks"] += 1
        self.bad_in_row = 0
        self.recent = deque(recent, maxlen=self.recent.maxlen)

    def state_dict(self) -> dict:
        return {"recent": list(self.recent), "bad_in_row": self.bad_in_row, "counts": dict(self.counts)}

    def load_state_dict(self, state: dict) -> None:
        self.recent = deque(state["recent"], maxlen=50)
        self.bad_in_row = state["bad_in_row"]
        self.counts = Counter(state["counts"])
