"""The `reward_model` verifier: a trained reward model scores the answer in its context.

    {"type": "reward_model", "model": "runs/rm/final"}                  # raw score as the value
    {"type": "reward_model", "model": "...", "scale": "sigmoid", "threshold": 0.5}

For open-ended prompts that no program can check: GRPO uses the score as the reward (its
group normalisation makes the raw scale harmless). `score` adds the task's conversation as
`prompt` (this type is registered `needs_prompt`); a spec may also carry its own `prompt`
(a string is one user turn, or a message list).

Spec fields:
    model      a `temper rm` output directory (required)
    scale      "raw" (default): the value is the score; "sigmoid": sigmoid(score), in (0, 1)
    threshold  the `correct` component is 1 when the value (after scaling) >= threshold
               (default 0 for raw, 0.5 for sigmoid: "preferred over a coin flip")
    precision  "auto" (default) | "bf16" | "fp32"

The model is loaded once per `VerifierContext` (`ctx.shared`) and scored under a lock, so
reward worker threads share one copy.
"""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

from tempering.errors import UserError
from tempering.types import IGNORE, Reward
from tempering.verifiers.base import register
from tempering.verifiers.context import VerifierContext


class RewardScorer:
    """A reward model with its tokenizer: conversations (prompt + answer) -> scores."""

    def __init__(self, model: Any, tokenizer: Any, precision: str = "auto", batch_size: int = 16):
        from tempering.data.padding import pad_id
        from tempering.data.render import ToolCallStyle, detect_tool_call_style

        self.model, self.tokenizer = model, tokenizer
        self.style: ToolCallStyle = detect_tool_call_style(tokenizer)
        self.precision, self.batch_size = precision, batch_size
        self.pad_id = pad_id(tokenizer)
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path, precision: str = "auto") -> RewardScorer:
        from tempering.models.load import load_tokenizer
        from tempering.models.reward import load_reward_model

        return cls(load_reward_model(str(path)), load_tokenizer(str(path)), precision)

    def sequence(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of a conversation through its last assistant token (what the model scores)."""
        from tempering.data.render import render_with_mask
        from tempering.models.reward import scored_prefix

        ex = render_with_mask(self.tokenizer, messages, self.style)
        return scored_prefix(ex.input_ids, [int(t != IGNORE) for t in ex.labels])

    def score(self, conversations: list[list[dict[str, Any]]]) -> list[float]:
        """One score per conversation (each ending with the assistant answer to judge)."""
        from tempering.models.reward import score_ids

        seqs = [self.sequence(c) for c in conversations]
        with self._lock:
            return score_ids(self.model, seqs, self.pad_id, self.batch_size, self.precision)


def _prompt_messages(prompt: Any) -> list[dict[str, Any]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and all(isinstance(m, dict) and "role" in m for m in prompt):
        return [dict(m) for m in prompt]
    raise UserError("reward_model verifier: 'prompt' must be a string or a list of messages")


@register("reward_model", needs_prompt=True)
def score_reward_model(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    """Score `completion` as the answer to `spec["prompt"]` with the reward model at `spec["model"]`."""
    if not spec.get("model"):
        raise UserError("reward_model verifier needs 'model': a `temper rm` output directory")
    if "prompt" not in spec:
        raise UserError("reward_model verifier needs the conversation to judge the answer in ('prompt')")
    scale = spec.get("scale", "raw")
    if scale not in ("raw", "sigmoid"):
        raise UserError(f"reward_model verifier: scale must be 'raw' or 'sigmoid', got {scale!r}")
    path, precision = str(Path(spec["model"]).expanduser().resolve()), spec.get("precision", "auto")
    scorer = ctx.shared(f"reward_model:{path}:{precision}", lambda: RewardScorer.load(path, precision))
    messages = _prompt_messages(spec["prompt"]) + [{"role": "assistant", "content": completion}]
    raw = scorer.score([messages])[0]
    value = 1.0 / (1.0 + math.exp(-raw)) if scale == "sigmoid" else raw
    threshold = float(spec.get("threshold", 0.5 if scale == "sigmoid" else 0.0))
    return Reward(
        value=value,
        components={"score": raw, "correct": float(value >= threshold)},
        detail=f"reward model score {raw:.4f}",
    )
