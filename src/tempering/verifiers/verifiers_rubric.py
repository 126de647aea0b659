"""The `verifiers` verifier: a `verifiers` environment's own rubric scores the completion.

Spec (made by `tempering.sources.verifiers_envs`; the environment loaded by `environments`, and
only one the config names or code registered: a row cannot choose the module to import):

    {"type": "verifiers", "env": "my_env", "env_args": {...}, "split": "train", "row": {...}}

The environment is loaded by its id (once per process) and the library runs its own rollout of
the row, `env.run_rollout`, the call its `evaluate` makes per sample, with a client that answers
with the completion Tempering's engine already sampled (`SampledCompletion`). So the library
builds the state, renders the completion, applies the parser and sums the rubric's weighted
reward functions exactly as in its own evaluation. The Reward:

  * `value`: the rubric's reward (the weighted sum of its reward functions);
  * `components`: every reward function and metric by name (weight-0 metrics such as
    `num_turns` included), plus `correct`: 1 when the reward reaches the environment's
    `pass_threshold` (the library's own pass rule, default 0.5), else 0, so Tempering's
    accuracy and pass@k count what the library's pass@k counts.

A reward function that raises is the library's business: it logs it and scores that function 0.
An empty reply is what the library's own chat client refuses (`EmptyModelResponseError`: no
content, no tool call): the library aborts that rollout with no turn and scores it (reward 0
with the rubrics above, `num_turns` 0); so does this client, and that score is the model's,
with the reason in `detail`. Any other rollout the library marks with an error is a
`VerifierError` (not the model's fault).

Where it runs: in the scoring thread, in-process. The environment is built once per process,
in the main thread (the library installs signal handlers as it builds one), which loading the
tasks through the `verifiers:` source does before any scoring; a thread that finds it unbuilt
(tasks read back from a JSONL file, a Ray reward actor) gets a `verifier_error` naming why.
Reward functions are the environment author's code reading the model's answer as data; a slow
one is cut by the rollout's verdict timeout (status `timeout`) but keeps its thread until it
returns. Code the model writes is never run here: environments whose tools would run it are
refused at load.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tempering.errors import UserError
from tempering.types import Reward
from tempering.verifiers.base import VerifierError, register

MODEL = "tempering"
"""The model name the library records for the sampled completion."""
EMPTY_REPLY = "EmptyModelResponseError"
"""The library's error for a reply with no content and no tool call (its rollout output names it so)."""


def check_spec(spec: dict[str, Any]) -> None:
    """The spec names an environment this run may load and carries a dataset row (KeyError names the
    missing field). Imports nothing: the environment is code, which a row cannot choose."""
    from tempering.verifiers.environments import environment_problem

    if not isinstance(spec["env"], str) or not isinstance(spec["row"], dict):
        raise UserError("'env' must be an environment id and 'row' a dataset row (a mapping)")
    problem = environment_problem(spec["env"])
    if problem is not None:
        raise UserError(problem)


@register("verifiers", check=check_spec)
def score_verifiers(spec: dict[str, Any], completion: str, ctx: Any) -> Reward:
    from tempering.verifiers.environments import CORRECT, load_environment

    check_spec(spec)
    env = load_environment(spec["env"], spec.get("env_args") or {})
    output = asyncio.run(env.run_rollout(spec["row"], sampled_completion(completion), MODEL, {}))
    error = output.get("error")
    empty = isinstance(error, dict) and error.get("error") == EMPTY_REPLY
    if error and not empty:
        raise VerifierError(f"the verifiers rollout failed (not the model's fault): {error}")
    reward = float(output["reward"])
    components = {name: float(v) for name, v in (output.get("metrics") or {}).items()}
    components[CORRECT] = 1.0 if reward >= env.pass_threshold else 0.0
    detail = f"empty reply: the library aborts the rollout ({EMPTY_REPLY}: {error['message']})" if empty else None
    return Reward(value=reward, components=components, detail=detail)


def sampled_completion(text: str) -> Any:
    """A `verifiers` Client whose one answer is `text` (what Tempering's engine sampled)."""
    import verifiers as vf
    from verifiers.types import Response, ResponseMessage  # pyright: ignore[reportMissingImports]  # not in the installed verifiers' typed modules

    class SampledCompletion(vf.Client):
        def setup_client(self, config: Any) -> Any:
            return None

        async def to_native_tool(self, tool: Any) -> Any:
            return tool

        async def to_native_prompt(self, messages: Any) -> tuple[Any, dict]:
            return messages, {}

        async def get_native_response(self, prompt: Any, model: str, sampling_args: Any, tools: Any = None, **kw: Any):
            return text

        async def raise_from_native_response(self, response: Any) -> None:
            if not response:  # the library's chat client's rule: no content and no tool call
                raise vf.EmptyModelResponseError("Model returned no content and did not call any tools")

        async def from_native_response(self, response: Any) -> Any:
            message = ResponseMessage(content=response, finish_reason="stop", is_truncated=False)
            return Response(id="tempering", created=int(time.time()), model=MODEL, message=message)

        async def close(self) -> None:
            return None

    return SampledCompletion(None)
