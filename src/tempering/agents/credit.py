"""Step-level credit for agent RL: what each turn did, its shaping reward, and advantages that add
the turns' credit to the episode outcome's.

    signals = turn_signals(before, after, observation)      # the rollout records one per model turn
    shaping = shaping_rewards(signals, valid=0.5, recovered=1.0, progress=1.0)   # one float per turn
    adv = step_credit_advantages(outcome, shaping, step_mask, groups, weight=0.25, gamma=1.0)

A turn's shaping reward (`shaping_rewards`):

  * `valid`: +valid when the turn made at least one tool call and none was malformed / unknown /
    schema-invalid; -valid when any was;
  * `recovered`: +recovered when the turn before had an error (invalid call, failed tool run,
    wrong answer) and this one made a call with no error (the error was read and fixed);
  * `progress`: +progress when a unittest run the agent started itself reports fewer failing tests
    than its previous run in the episode (`FAILED (failures=2)` -> `OK`). It reads the agent's own
    output, which the agent could fake; the outcome is judged by hidden tests and dominates.

Advantages (`step_credit_advantages`, pure tensors): the outcome's group advantage on every token
of the episode, plus `weight` times the discounted process-supervision advantage of the shaping
rewards (`discounted_step_advantages`: normalised over the group's steps, summed from each token's
turn on), clipped to [-1, 1] first. So a token's shaping share is at most `weight` (< 1), while a
GRPO outcome advantage in a group that does not tie is at least 1/sqrt(G-1) in size (0.58 for
G = 4): the outcome dominates whenever it says anything, and the turns decide among episodes with
the same outcome.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the rollout records signals without torch; the tensor functions import it when called
    import torch

_RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
_FAILED = re.compile(r"^FAILED \(([^)]*)\)", re.M)


@dataclass
class TurnSignals:
    """What one model turn did, read from the environment's counters and the turn's observation."""

    calls: int = 0
    """Tool calls that ran (valid ones)."""
    invalid: int = 0
    """Malformed, unknown or schema-invalid calls."""
    errors: int = 0
    """Invalid calls, failed tool runs and wrong answers of this turn."""
    failing_tests: int | None = None
    """Failing + erroring tests in the last unittest summary of the turn's tool output (None: no run)."""


def failing_tests(text: str) -> int | None:
    """Failures + errors of the last unittest summary in `text` ("OK" -> 0), None when it has none."""
    if not _RAN.search(text):
        return None
    failed = list(_FAILED.finditer(text))
    if not failed:
        return 0 if re.search(r"^OK\b", text, re.M) else None
    counts = dict(part.strip().split("=", 1) for part in failed[-1].group(1).split(",") if "=" in part)
    return sum(int(v) for k, v in counts.items() if k.strip() in ("failures", "errors") and v.strip().isdigit())


def turn_signals(before: dict[str, int], after: dict[str, int], observation: list[dict[str, Any]]) -> TurnSignals:
    """A turn's signals from the episode counters before and after it (`tool_calls`, `invalid_calls`,
    `tool_errors`, `wrong_answers`) and the messages the environment answered with."""

    def delta(key: str) -> int:
        return after.get(key, 0) - before.get(key, 0)

    found = [f for m in observation if m.get("role") == "tool" for f in [failing_tests(str(m.get("content", "")))]]
    found = [f for f in found if f is not None]
    return TurnSignals(
        calls=delta("tool_calls"),
        invalid=delta("invalid_calls"),
        errors=delta("invalid_calls") + delta("tool_errors") + delta("wrong_answers"),
        failing_tests=found[-1] if found else None,
    )


def shaping_rewards(signals: list[TurnSignals], *, valid: float, recovered: float, progress: float) -> list[float]:
    """One shaping reward per turn (see the module docstring)."""
    out: list[float] = []
    last_failing: int | None = None
    for k, s in enumerate(signals):
        r = 0.0
        if s.invalid:
            r -= valid
        elif s.calls:
            r += valid
        if k > 0 and signals[k - 1].errors > 0 and s.errors == 0 and s.calls > 0:
            r += recovered
        if s.failing_tests is not None:
            if last_failing is not None and s.failing_tests < last_failing:
                r += progress
            last_failing = s.failing_tests
        out.append(r)
    return out


def discounted_step_advantages(
    rewards: torch.Tensor, step_mask: torch.Tensor, groups: torch.Tensor, gamma: float, estimator: str = "grpo"
) -> torch.Tensor:
    """Process-supervision advantages with a discount: (N, T) -> (N, T).

    Step rewards go through the advantage estimator as in `grpo_advantages`; a token's
    advantage is sum_k gamma^k * (normalised reward of the k-th step at or after it), so
    gamma = 1 is exactly `grpo_advantages(rewards, groups=..., step_mask=...)`.
    """
    import torch

    from tempering.objectives.grpo_math import grpo_advantages

    undiscounted = grpo_advantages(rewards, estimator, groups=groups, step_mask=step_mask)
    if gamma == 1.0:
        return undiscounted
    # the reverse cumsum's differences are the normalised step rewards, at the step tokens
    shifted = torch.cat([undiscounted[:, 1:], torch.zeros_like(undiscounted[:, :1])], dim=1)
    normalised = (undiscounted - shifted) * step_mask
    out = torch.zeros_like(normalised)
    running = torch.zeros(normalised.shape[0], dtype=normalised.dtype)
    for t in range(normalised.shape[1] - 1, -1, -1):
        running = torch.where(step_mask[:, t] > 0, normalised[:, t] + gamma * running, running)
        out[:, t] = running
    return out


def step_credit_advantages(
    outcome: torch.Tensor,
    shaping: torch.Tensor,
    step_mask: torch.Tensor,
    groups: torch.Tensor,
    *,
    weight: float,
    gamma: float = 1.0,
    estimator: str = "grpo",
) -> torch.Tensor:
    """Outcome plus weighted turn credit, (N, T): `outcome` (N,) episode rewards, `shaping` (N, T)
    each turn's shaping reward at the turn's last token (`step_mask` marks them), `groups` (N,).

    A[i, t] = A_outcome[i] + weight * clip(S[i, t], -1, 1), with A_outcome the estimator's group
    advantage of the outcomes and S the discounted process advantage of the shaping rewards.
    """
    if not 0 <= weight < 1:
        raise ValueError(f"step credit weight must be in [0, 1) so the outcome dominates, got {weight}")
    from tempering.objectives.grpo_math import grpo_advantages

    base = grpo_advantages(outcome, estimator, groups=groups)[:, None].expand_as(shaping)
    turns = discounted_step_advantages(shaping, step_mask, groups, gamma, estimator).clamp(-1.0, 1.0)
    return base + weight * turns
