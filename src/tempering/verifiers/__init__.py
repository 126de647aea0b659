"""Verifiers: `score(task, completion, ctx=None) -> Reward`, one implementation serving reward and eval.

Plug-in point: `@register("name")` a function `(spec: dict, completion: str, ctx: VerifierContext) -> Reward`.
`VerifierContext` carries what verifiers share (the sandbox code runs in); pass one to every
`score` call of a loop, and close it (or use it as a context manager) when the loop ends.
"""

from tempering.verifiers import answers as _answers  # noqa: F401  (registers numeric/exact/regex/math)
from tempering.verifiers import code as _code  # noqa: F401  (registers code)
from tempering.verifiers import reasoning_gym as _reasoning_gym  # noqa: F401  (registers reasoning_gym)
from tempering.verifiers import reward_model as _reward_model  # noqa: F401  (registers reward_model)
from tempering.verifiers import safety as _safety  # noqa: F401  (registers refusal/abstain)
from tempering.verifiers import structure as _structure  # noqa: F401  (registers format/tool_call/composite)
from tempering.verifiers import verifiers_rubric as _verifiers_rubric  # noqa: F401  (registers verifiers)
from tempering.verifiers.base import VERIFIERS, UnknownVerifier, VerifierError, register, score
from tempering.verifiers.context import VerifierContext, VerifierContextClosed

__all__ = [
    "VERIFIERS",
    "UnknownVerifier",
    "VerifierContext",
    "VerifierContextClosed",
    "VerifierError",
    "register",
    "score",
]
