"""Building a `verifiers` environment (PrimeIntellect's library) and checking it can be used
here: the `verifiers` verifier (`verifiers_rubric`) scores with it, and the `verifiers:<env_id>`
task source (`tempering.sources.verifiers_envs`, which documents the rules) reads its rows.

The library is imported lazily (it takes seconds). Constructing an environment installs
SIGINT/SIGTERM handlers; `load_environment` puts the caller's handlers back.
"""

from __future__ import annotations

import json
import signal
import threading
from functools import lru_cache
from typing import Any

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
