"""`verifiers` environments (PrimeIntellect's library) as `Task`s: `tasks.source: "verifiers:<env_id>"`.

    tasks: {source: "verifiers:my_env", env_args: {difficulty: 2}, split: train, n: 200}

`<env_id>` is what the library's own `vf.load_environment(env_id, **env_args)` takes (as in
`vf-eval <env_id>` and prime-rl's `env.id`; the library's own id-to-module rule is used): an importable module (an installed environment
package, `my-env` meaning module `my_env`, or any dotted module path) that exposes
`load_environment(**env_args)`. `split: train` reads the environment's `dataset`,
`split: heldout` its `eval_dataset`; `n` takes the first rows in the dataset's order.

Each row becomes a Task whose messages are the row's `prompt` (the library builds it from
`question` with the environment's system prompt and few-shot turns) and whose verifier spec is
`{"type": "verifiers", "env", "env_args", "split", "row", "code"}`: `row` is the whole dataset
row (answer, info, task and any other column the reward functions read), so the `verifiers`
verifier (`tempering.verifiers.verifiers_rubric`) scores a completion with the environment's
own rubric; `code` is a digest of the environment module's source and the library version
(`module_digest`), so an eval cached on the tasks' content is redone when the rubric changes.

Only single-turn environments (`vf.SingleTurnEnv`) are taken. A multi-turn environment
(`ToolEnv`, `PythonEnv`, any `MultiTurnEnv`) would run its tools and `env_response` on this host,
outside Tempering's sandbox, so it is refused; so is a rubric with group-level reward
functions (a per-sample reward cannot come from them) and one that names a function
`correct` (Tempering's pass component, see the verifier). Loading and these checks live in
`tempering.verifiers.environments`, which the verifier shares.
"""

from __future__ import annotations

import json
from typing import Any

from tempering.config import Options, TaskSourceSettings
from tempering.sources.registry import register_source
from tempering.types import Message, Task
from tempering.verifiers.environments import (
    UnusableEnvironment,
    load_environment,
    module_digest,
    register_environment,
)


def environment_rows(env_id: str, env_args: dict[str, Any], split: str) -> list[dict[str, Any]]:
    """The environment's dataset rows as JSON values (`split`: "train" or "heldout").

    Raises:
        UnusableEnvironment: no such dataset, no prompt column, a text prompt, or rows that are not JSON.
    """
    where = f"verifiers:{env_id}"
    env = load_environment(env_id, env_args)
    dataset = env.build_dataset() if split == "train" else env.build_eval_dataset()
    if dataset is None:
        other = "eval_dataset" if split == "train" else "dataset"
        want = "dataset" if split == "train" else "eval_dataset"
        raise UnusableEnvironment(f"{where}: the environment has no {want} for split {split!r} (only an {other})")
    if "prompt" not in dataset.column_names:
        raise UnusableEnvironment(f"{where}: its {split} dataset has no 'prompt' column")
    try:
        rows = json.loads(json.dumps(dataset.to_list()))
    except TypeError as exc:
        raise UnusableEnvironment(f"{where}: its rows are not JSON values ({exc})") from None
    return rows


def environment_tasks(env_id: str, env_args: dict[str, Any], split: str, n: int) -> list[Task]:
    """The first `n` rows of the environment's `split` dataset as Tasks (module docstring).

    Raises:
        UnusableEnvironment: as `environment_rows`, or a prompt that is not a list of text messages.
    """
    tasks = []
    rows = environment_rows(env_id, env_args, split)[:n]
    code = module_digest(env_id)
    for index, row in enumerate(rows):
        example = row.get("example_id", index)
        spec = {"type": "verifiers", "env": env_id, "env_args": env_args, "split": split, "row": row, "code": code}
        tasks.append(
            Task(
                id=f"vf-{env_id}-{split}-{example}",
                messages=_messages(f"verifiers:{env_id} row {index}", row["prompt"]),
                verifier=spec,
                track=row["task"] if isinstance(row.get("task"), str) and row["task"] else "general",
                source=f"verifiers:{env_id}",
            )
        )
    return tasks


def _messages(where: str, prompt: Any) -> list[Message]:
    if not isinstance(prompt, list) or not prompt:
        raise UnusableEnvironment(f"{where}: the prompt must be a non-empty list of chat messages, got {prompt!r:.60}")
    messages = []
    for m in prompt:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or m.get("role") not in _ROLES:
            raise UnusableEnvironment(
                f"{where}: only text messages (system/user/assistant) are supported, got {m!r:.80}"
            )
        messages.append(Message(role=m["role"], content=m["content"]))
    return messages


_ROLES = {"system", "user", "assistant"}


class VerifiersSourceSettings(Options):
    """verifiers:<env_id>'s own settings."""

    env_args: dict[str, Any] = {}
    """Keyword arguments of the environment's `load_environment`."""


@register_source("verifiers:", VerifiersSourceSettings)
def _verifiers_source(s: TaskSourceSettings, arg: str) -> list[Task]:
    register_environment(arg)  # the config names it: this run may load it (and its rows' specs may refer to it)
    env_args = s.options_as(VerifiersSourceSettings).env_args
    return environment_tasks(arg, env_args, "train" if s.split == "train" else "heldout", s.n)
