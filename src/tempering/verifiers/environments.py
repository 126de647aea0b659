"""Loading a `verifiers` environment (PrimeIntellect's library) by id, once per process.

What the `verifiers:` task source (`tempering.sources.verifiers_envs`) and the `verifiers`
verifier (`verifiers_rubric`) share: `load_environment(env_id, env_args)` imports the module by
the library's own id rule and calls its `load_environment(**env_args)`, then refuses what
Tempering cannot run (see `UnusableEnvironment`'s callers): a non-Environment, a multi-turn
environment (its tools and `env_response` would run outside Tempering's sandbox), a rubric with
group-level reward functions or a function named `correct`.

An environment id is a module to import and call, so it is code: only environments named by
the run's config (a `verifiers:<env_id>` task source, which registers its id as it loads) or
registered by code (`register_environment`, e.g. from a config's plug-in module) may load. A
task row's spec only *refers* to one of those: a row read from a file that names any other
module (`this`, `venv.__main__`, whatever is installed) is refused before anything is imported
(`environment_problem`, the `verifiers` spec check that task loading runs on every row).

The library is imported lazily (it takes seconds). Building an environment installs
SIGINT/SIGTERM handlers, which only a process's main thread may do; the caller's handlers are
put back afterwards.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

from tempering.errors import UserError

CORRECT = "correct"
"""The component Tempering's `Reward.passed` reads; the verifier sets it from the pass threshold."""


NAMED: set[str] = set()
"""Environment ids this process may load: named by a config's `verifiers:` source, or registered."""


class UnusableEnvironment(UserError):
    """A `verifiers:` source that cannot be used; the message is one line naming the environment."""


def register_environment(env_id: str) -> None:
    """Let `env_id` load in this process (a config's `verifiers:<env_id>` source does this as it loads)."""
    NAMED.add(env_id)


def environment_problem(env_id: str) -> str | None:
    """Why a task row may not load `env_id` (it is neither named by the config nor registered), or None."""
    if env_id in NAMED:
        return None
    return (
        f"environment {env_id!r} is not named by the config (a `verifiers:{env_id}` task source) nor registered "
        "(`register_environment`): a task row cannot choose code to import"
    )


def load_environment(env_id: str, env_args: dict[str, Any] | None = None) -> Any:
    """The environment `env_id` built with `env_args` (cached per process), checked for use here.

    Raises:
        UnusableEnvironment: it is not named by the config nor registered (`environment_problem`),
            does not import or build, is not a `verifiers` Environment, is multi-turn, or its
            rubric cannot score one sample at a time.
    """
    problem = environment_problem(env_id)
    if problem is not None:
        raise UnusableEnvironment(f"verifiers:{env_id}: {problem}")
    args = env_args or {}
    try:
        key = json.dumps(args, sort_keys=True)
    except TypeError as exc:
        raise UnusableEnvironment(f"verifiers:{env_id}: env_args must be JSON values ({exc})") from None
    return _load(env_id, key)


@lru_cache(maxsize=16)
def _load(env_id: str, args_json: str) -> Any:
    where = f"verifiers:{env_id}"
    try:
        import datasets
        import verifiers as vf
        from verifiers.utils.env_utils import import_env_module  # pyright: ignore[reportMissingImports]  # not in the installed verifiers' typed modules
    except ImportError as exc:
        raise UnusableEnvironment(
            f"{where}: the verifiers library is not usable here ({exc}); see the `verifiers` extra"
        ) from None
    if threading.current_thread() is not threading.main_thread():
        raise UnusableEnvironment(
            f"{where}: environments are built in a process's main thread (the library sets signals)"
        )
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    args = json.loads(args_json)
    bars_were_on = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # the library maps its dataset at build time: no bars in a CLI error
    try:
        module = import_env_module(env_id)  # the library's own id -> module rule
        build = getattr(module, "load_environment", None)
        if not callable(build):
            raise UnusableEnvironment(f"{where}: module {module.__name__!r} has no load_environment")
        env: Any = build(**args)  # the library's Environment
    except UnusableEnvironment:
        raise
    except Exception as exc:
        raise UnusableEnvironment(f"{where}: {_root_cause(exc)}") from None
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        if bars_were_on:
            datasets.enable_progress_bars()
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


def module_digest(env_id: str) -> str:
    """sha256 of the environment module's source file and the library version (16 hex digits)."""
    import verifiers as vf
    from verifiers.utils.env_utils import env_module_name  # pyright: ignore[reportMissingImports]  # as above

    path = getattr(sys.modules.get(env_module_name(env_id)), "__file__", None)
    text = Path(path).read_bytes() if path else b""
    return hashlib.sha256(text + vf.__version__.encode()).hexdigest()[:16]
