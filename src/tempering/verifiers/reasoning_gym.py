"""The `reasoning_gym` verifier: a reasoning-gym dataset's own `score_answer` on the extracted answer.

Answer extraction from a chat completion:
  1. the content of the last `<answer>...</answer>` tag pair, stripped (reasoning-gym's own
     convention, which the task prompt asks for);
  2. else the shared final-answer rule of `tempering.verifiers.answers.extract_final_answer`
     (last `\\boxed{}`, else the text after the last "answer is"/"answer:", else the whole
     completion, stripped).
The dataset then scores that string against the entry stored in the spec (see
`tempering.sources.reasoning_gym`); many datasets give partial credit, so `value` may lie
strictly between 0 and 1. `components.correct` is 1 only for a full score.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tempering.sources.reasoning_gym import build_dataset
from tempering.types import Reward
from tempering.verifiers.answers import extract_final_answer
from tempering.verifiers.base import register
from tempering.verifiers.context import VerifierContext

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def extract_tagged_answer(completion: str) -> str:
    """The answer of a completion, by the rule in the module docstring."""
    tagged = _ANSWER_TAG.findall(completion)
    return tagged[-1].strip() if tagged else extract_final_answer(completion)


@register("reasoning_gym")
def score_reasoning_gym(spec: dict[str, Any], completion: str, ctx: VerifierContext) -> Reward:
    missing = [k for k in ("dataset", "seed", "size", "config", "entry") if k not in spec]
    if missing:
        raise ValueError(f"reasoning_gym verifier spec is missing {missing}: {spec}")
    dataset = build_dataset(spec["dataset"], spec["seed"], spec["size"], json.dumps(spec["config"], sort_keys=True))
    answer = extract_tagged_answer(completion)
    value = float(dataset.score_answer(answer, spec["entry"]))
    return Reward(value=value, components={"correct": 1.0 if value >= 1.0 else 0.0}, detail=f"extracted: {answer!r}")
