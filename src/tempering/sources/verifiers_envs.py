"""`verifiers` environments (PrimeIntellect's library) as `Task`s: `tasks.source: "verifiers:<env_id>"`.

    tasks: {source: "verifiers:my_env", env_args: {difficulty: 2}, split: train, n: 200}

`<env_id>` is what the library's own `vf.load_environment(env_id, **env_args)` takes (as in
`vf-eval <env_id>` and prime-rl's `env.id`; the library's own id-to-module rule is used): an importable module (an installed environment
package, `my-env` meaning module `my_env`, or any dotted module path) that exposes
`load_environment(**env_args)`. `split: train` reads the environment's `dataset`,
`split: heldout` its `eval_dataset`; `n` takes the first rows in the dataset's order.

Each row becomes a Task whose messages are the row's `prompt` (the library builds it from
`question` with the environment's system prompt and few-shot turns) and whose verifier spec is
`{"type": "verifiers", "env": env_id, "env_args": {...}, "split": ..., "row": {...}}`: the whole
dataset row (answer, info, task and any other column the reward functions read), so the
`verifiers` verifier (`tempering.verifiers.verifiers_rubric`) scores a completion with the
environment's own rubric in any process.

Only single-turn environments (`vf.SingleTurnEnv`) are taken. A multi-turn environment
(`ToolEnv`, `PythonEnv`, any `MultiTurnEnv`) would run its tools and `env_response` on this host,
outside Tempering's sandbox, so it is refused; so is a rubric with group-level reward
functions (a per-sample reward cannot come from them) and one that names a function
`correct` (Tempering's pass component, see the verifier).

The library is imported lazily (it takes seconds). Constructing an environment installs
SIGINT/SIGTERM handlers; `load_environment` puts the caller's handlers back.
"""

from __future__ import annotations

import json
import signal
import threading
from functools import lru_cache
from typing import Any

from tempering.config import TaskSourceSettings
from tempering.sources.registry import register_source
from tempering.types import Message, Task

CORRECT = "correct"
"""The component Tempering's `Reward.passed` reads; the verifier sets it from the pass threshold."""


class UnusableEnvironment(ValueError):
    """A `verifiers:` source that cannot be used; the message is one line naming the environment."""


def load_environment(env_id: str, env_args: dict[str, Any] | None = None) -> Any:
    """The environment `env_id` built with `env_args` (cached per process), checked for use here.

    Raises:
        UnusableEnvironment: it does not import or build, is not a `verifiers` Environment, is
            multi-turn, or its rubric cannot score one sample at a time.
    """
    args = env_args or {}
    try:
        key = json.dumps(args, sort_keys=True)
    except TypeError as exc:
        raise UnusableEnvironment(f"verifiers:{env_id}: env_args must be JSON values ({exc})") from None
    return _load(env_id, key)


@lru_cache(maxsize=16)
def _load(env_id: str, args_json: str) -> Any:
    import verifiers as vf
    from verifiers.utils.env_utils import import_env_module

    where = f"verifiers:{env_id}"
    if threading.current_thread() is not threading.main_thread():
        raise UnusableEnvironment(
            f"{where}: environments are built in a process's main thread (the library sets signals)"
        )
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    args = json.loads(args_json)
    try:
        module = import_env_module(env_id)  # the library's own id -> module rule
        build = getattr(module, "load_environment", None)
        if not callable(build):
            raise UnusableEnvironment(f"{where}: module {module.__name__!r} has no load_environment")
        env = build(**args)
    except UnusableEnvironment:
        raise
    except Exception as exc:
        raise UnusableEnvironment(f"{where}: {_root_cause(exc)}") from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    _check(where, env, vf)
    env.env_id, env.env_args = env.env_id or env_id, env.env_args or args  # as vf.load_environment does
    return env


def _root_cause(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, ModuleNotFoundError):
        return f"no module named {exc.name!r} (an environment is a module exposing load_environment)"
    if isinstance(exc, KeyError):
        return f"the dataset has no {exc.args[0]!r} column (an environment's rows need 'prompt' or 'question')"
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _check(where: str, env: Any, vf: Any) -> None:
    if not isinstance(env, vf.Environment):
        raise UnusableEnvironment(
            f"{where}: load_environment returned {type(env).__name__}, not a verifiers Environment"
        )
    if not isinstance(env, vf.SingleTurnEnv):
        raise UnusableEnvironment(
            f"{where}: {type(env).__name__} is multi-turn; only SingleTurnEnv is supported "
            "(a multi-turn environment's tools and env_response would run outside Tempering's sandbox)"
        )
    if env.rubric.has_group_rewards:
        raise UnusableEnvironment(
            f"{where}: its rubric has group-level reward functions; a reward per sample is needed"
        )
    if CORRECT in env.rubric._get_reward_func_names():
        raise UnusableEnvironment(
            f"{where}: a reward function named {CORRECT!r} clashes with Tempering's pass component"
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
    for index, row in enumerate(environment_rows(env_id, env_args, split)[:n]):
        example = row.get("example_id", index)
        spec = {"type": "verifiers", "env": env_id, "env_args": env_args, "split": split, "row": row}
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


@register_source("verifiers:")
def _verifiers_source(s: TaskSourceSettings, arg: str) -> list[Task]:
    return environment_tasks(arg, s.env_args, "train" if s.split == "train" else "heldout", s.n)
