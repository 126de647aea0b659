"""Verifiers: `score(task, completion) -> Reward`, one implementation serving reward and eval.

Plug-in point: `@register("name")` a function `(spec: dict, completion: str) -> Reward`.
"""

from tempering.verifiers.base import UnknownVerifier, VERIFIERS, VerifierError, register, score
from tempering.verifiers import answers as _answers  # noqa: F401  (registers numeric/exact/regex/math)
from tempering.verifiers import structure as _structure  # noqa: F401  (registers format/tool_call/composite)
from tempering.verifiers import reasoning_gym as _reasoning_gym  # noqa: F401  (registers reasoning_gym)
from tempering.verifiers import code as _code  # noqa: F401  (registers code)

__all__ = ["VERIFIERS", "UnknownVerifier", "VerifierError", "register", "score"]
