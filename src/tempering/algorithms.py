"""The registries of RL and preference algorithms: advantage estimators, policy losses (each with
its aggregation) and preference losses, each a pure tensor function registered by name.

    @register_advantage("rloo")
    def rloo_advantages(rewards, groups): ...          # (M,), (M,) -> (M,)

    @register_policy_loss("gspo", aggregation="seq_mean", stale_safe=True)
    def gspo_loss(logp, logp_old, advantages, mask, *, clip_low, clip_high): ...

    @register_preference_loss("kto", reference=True)
    def kto_loss(pairs, *, beta, label_smoothing, gamma): ...

    @register_divergence("jsd")
    def generalized_jsd(student_logp, teacher_logp, *, beta=0.5): ...   # (N, V), (N, V) -> (N,)

    @register_tinker_loss("ppo", inputs=("target_tokens", "logprobs", "advantages"), config={...})
    def ppo(logp, inputs, *, clip_low_threshold, clip_high_threshold): ...   # (T,), {(T,)} -> ()

The signatures each family takes are in `objectives/advantages.py`, `objectives/policy_losses.py`,
`objectives/preference.py`, `objectives/divergences.py` and `objectives/tinker_losses.py` (the
losses `temper tinker serve` computes for the Tinker API), where the built-ins live. A config
names an algorithm by its registered name (`grpo.loss`, `grpo.advantage`, `dpo.loss`); its
validator asks `check_name`, which imports nothing: the built-ins' names are read from their
decorators in the source of `BUILTIN_MODULES` (`builtin_names`), so validating a config neither
imports torch nor runs a config's `plugins`. With `plugins` named, a name no built-in has is
left to them: `lookup`, when the run starts, imports the plug-in modules (a module registers its
functions when imported, so a loss defined outside the package is one decorated function in a
module on the path) and refuses the name then. An unknown name, or a name registered in another
family, is a one-line error either way.

This module sits in the bottom layer, next to `config`, so that configs validate names against
it; it imports no torch itself. The built-in algorithms (torch code in `objectives/`) are imported
by name on the first lookup, the way `recipes/registry.py` imports a command's runner.
"""

from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from tempering.errors import UserError
from tempering.pyast import parse_module

Family = Literal["advantage", "policy_loss", "preference_loss", "divergence", "tinker_loss"]

FAMILY_WORDS: dict[Family, str] = {
    "advantage": "advantage estimator",
    "policy_loss": "policy loss",
    "preference_loss": "preference loss",
    "divergence": "distillation divergence",
    "tinker_loss": "Tinker API loss",
}

AGGREGATIONS = ("token_mean", "seq_mean", "constant", "micro_token_mean")
"""How a policy loss's per-token values become the step's loss (`objectives/grpo_math.py`)."""

BUILTIN_MODULES = (
    "tempering.objectives.advantages",
    "tempering.objectives.policy_losses",
    "tempering.objectives.preference",
    "tempering.objectives.divergences",
    "tempering.objectives.tinker_losses",
)


@dataclass(frozen=True)
class Algorithm:
    """One registered function and what its family records about it."""

    name: str
    family: Family
    fn: Callable[..., Any]
    options: dict[str, Any] = field(default_factory=dict)
    """policy losses: `aggregation`, `stale_safe`; preference losses: `reference` (needs reference log-probs);
    advantage estimators: `domains` (takes each sample's domain id); Tinker API losses: `inputs`,
    `config` and `provenance` (see `register_tinker_loss`)."""


REGISTRY: dict[tuple[str, str], Algorithm] = {}
"""Every registered algorithm by (family, name)."""

_DECORATORS: dict[str, Family] = {f"register_{family}": family for family in FAMILY_WORDS}


@functools.cache
def builtin_names() -> dict[tuple[str, str], tuple[str, ...]]:
    """(family, name) -> the keyword-only parameters (the settings) of every built-in algorithm,
    read from the `@register_*("name")` decorators in the source of `BUILTIN_MODULES`: no import,
    so no torch. `tests/test_config_no_torch.py` checks this equals what importing them registers."""
    return {key: tuple(a.arg for a in node.args.kwonlyargs) for key, node, _ in _builtin_decorators()}


@functools.cache
def builtin_options() -> dict[tuple[str, str], dict[str, Any]]:
    """(family, name) -> the keyword arguments its `@register_*("name", key=value)` decorator gives
    as constants (`aggregation`, `stale_safe`, ...; not names or expressions), read from source
    like `builtin_names`."""
    return {
        key: {k.arg: k.value.value for k in decorator.keywords if k.arg and isinstance(k.value, ast.Constant)}
        for key, _, decorator in _builtin_decorators()
    }


def _builtin_decorators() -> list[tuple[tuple[str, str], ast.FunctionDef, ast.Call]]:
    """((family, name), the function, its `@register_*` call) for every built-in registration."""
    from pathlib import Path

    root = Path(__file__).parent
    found = []
    for module in BUILTIN_MODULES:
        path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
        for node in ast.walk(parse_module(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef):
                for decorator in node.decorator_list:
                    key = _registration(decorator)
                    if key is not None and isinstance(decorator, ast.Call):
                        found.append((key, node, decorator))
    return found


def _registration(decorator: ast.expr) -> tuple[str, str] | None:
    """(family, name) of a `@register_<family>("name", ...)` decorator, else None."""
    if not (isinstance(decorator, ast.Call) and decorator.args and isinstance(decorator.args[0], ast.Constant)):
        return None
    func = decorator.func
    word = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    family = _DECORATORS.get(word)
    return None if family is None else (family, str(decorator.args[0].value))


def _register(family: Family, name: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    if not name.isidentifier():
        raise UserError(f"{FAMILY_WORDS[family]} name {name!r}: expected a word (letters, digits, _)")

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        known = REGISTRY.get((family, name))
        same = known is not None and (known.fn.__module__, known.fn.__qualname__) == (fn.__module__, fn.__qualname__)
        if known is not None and not same:
            raise UserError(
                f"{FAMILY_WORDS[family]} {name!r} is already registered (to {known.fn.__module__}.{known.fn.__qualname__})"
            )
        REGISTRY[(family, name)] = Algorithm(name, family, fn, options)
        return fn

    return decorate


def register_advantage(name: str, domains: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(rewards (M,), groups (M,) int64) -> advantages (M,)` as an advantage estimator;
    `domains=True`: `fn(rewards, groups, domains (M,) int64)`, also given each sample's domain id."""
    return _register("advantage", name, domains=domains)


def register_policy_loss(
    name: str, aggregation: str = "token_mean", stale_safe: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(logp, logp_old, advantages, mask, *, clip_low, clip_high) -> (per_token, clipped)`
    (all (B, T)) as a policy loss, reduced by `aggregation` unless a config overrides it.

    `stale_safe=True`: the loss keeps an update on samples of an older policy bounded, through the
    ratio p / p_old it is given (a clipped ratio, a capped importance weight), so it may train with
    `grpo.max_off_policy_steps` > 0; a loss that ignores `logp_old`, or uses it unbounded, may not."""
    if aggregation not in AGGREGATIONS:
        raise UserError(f"aggregation {aggregation!r}: expected one of {', '.join(AGGREGATIONS)}")
    return _register("policy_loss", name, aggregation=aggregation, stale_safe=stale_safe)


def stale_safe_losses() -> list[str]:
    """The policy losses registered (or built in, read from source) with `stale_safe=True`, sorted;
    imports nothing, as `check_name`."""
    built = {n for (fam, n), opts in builtin_options().items() if fam == "policy_loss" and opts.get("stale_safe")}
    registered = {n for (fam, n), a in REGISTRY.items() if fam == "policy_loss" and a.options.get("stale_safe")}
    return sorted(built | registered)


def is_stale_safe(name: str) -> bool | None:
    """Whether policy loss `name` is `stale_safe`: from its registration, or a built-in's source;
    None when neither knows it (a plug-in's not yet imported)."""
    if (found := REGISTRY.get(("policy_loss", name))) is not None:
        return bool(found.options.get("stale_safe"))
    opts = builtin_options().get(("policy_loss", name))
    return None if opts is None else bool(opts.get("stale_safe"))


def register_preference_loss(name: str, reference: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(pairs: PairLogps, *, beta, label_smoothing, gamma) -> (losses, chosen_reward,
    rejected_reward)` (all (B,)) as a preference loss; `reference=False`: it needs no reference model."""
    return _register("preference_loss", name, reference=reference)


def register_divergence(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(student_logp, teacher_logp, *, settings...) -> per_row` ((N, V) log-softmaxes
    -> (N,)) as a divergence between next-token distributions (on-policy distillation's
    `rollout.divergence`). Its keyword-only parameters are its settings: `rollout.divergence_settings`
    (and `rollout.beta`) reach the divergences that take them, and no other."""
    return _register("divergence", name)


def keyword_settings(fn: Callable[..., Any]) -> tuple[str, ...]:
    """The keyword-only parameters of a registered function (a divergence's settings)."""
    import inspect

    return tuple(n for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY)


def register_tinker_loss(
    name: str, inputs: tuple[str, ...], config: dict[str, float | None] | None = None, provenance: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(logp (T,), inputs: {name: (T,)}, **config) -> loss ()` as a built-in loss of the
    Tinker API (`forward_backward(data, loss_fn=name)` on `temper tinker serve`).

    `inputs`: the `loss_fn_inputs` every datum must carry (no more, no fewer); `config`: the
    `loss_fn_config` keys it takes with their defaults (None: the request must give it);
    `provenance=True`: the loss trains on recorded samples, so the server also hands it
    `sampled` (1 where the datum's provenance names a sampled token) and `sampler_logprobs` (what
    the sampler recorded for that token, 0 elsewhere), from `sample(record_stability_info=True)`.
    """
    return _register("tinker_loss", name, inputs=tuple(inputs), config=dict(config or {}), provenance=provenance)


def load(plugins: tuple[str, ...] | list[str] = ()) -> None:
    """Import the built-in algorithms and the plug-in modules (each registers on import).

    Raises:
        ValueError: a plug-in module does not import (one line naming it and why).
    """
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    import_plugins(plugins)


def is_module_name(name: object) -> bool:
    """`pkg.module`, not a path or a file name (`my_rl.py` names the module `my_rl`)."""
    return isinstance(name, str) and all(p.isidentifier() for p in name.split(".")) and not name.endswith(".py")


def import_plugins(modules: tuple[str, ...] | list[str]) -> None:
    """Import the plug-in modules a config names (`grpo.plugins`, `dpo.plugins`, a suite's
    `plugins`): module names on the path, never file paths; each registers what it defines (an
    algorithm, a verifier) as it is imported, and a name already taken by another function is
    refused by its registry. Only a config names a plug-in: a task row cannot.

    Raises:
        UserError: a name that is not a module name, or a module that does not import (one line).
    """
    for module in modules:
        if not is_module_name(module):
            raise UserError(f"plugin {module!r} is not a module name (dotted words on the path), not a path")
        try:
            importlib.import_module(module)
        except Exception as exc:  # any failure of a user's module is reported in one line
            raise UserError(f"plugin module {module!r} does not import ({type(exc).__name__}: {exc})") from None


def names(family: Family) -> list[str]:
    """The registered names of one family, sorted (after `load`)."""
    return sorted(name for fam, name in REGISTRY if fam == family)


def lookup(family: Family, name: str, plugins: tuple[str, ...] | list[str] = ()) -> Algorithm:
    """The registered algorithm, loading built-ins and `plugins` first.

    Raises:
        UserError: `name` is registered in another family, or nowhere (the message lists the names).
    """
    load(plugins)
    found = REGISTRY.get((family, name))
    if found is not None:
        return found
    raise _unknown(family, name, set(REGISTRY))


def check_name(family: Family, name: str, plugins: tuple[str, ...] | list[str] = ()) -> None:
    """Refuse `name` unless a built-in (`builtin_names`) or an already registered algorithm of
    `family` has it, or `plugins` are named (they may register it: `lookup` decides when the run
    starts). Imports nothing and runs no plug-in: what config validation calls.

    Raises:
        UserError: as `lookup`.
    """
    known = set(builtin_names()) | set(REGISTRY)
    if (family, name) in known or plugins:
        return
    raise _unknown(family, name, known)


def _unknown(family: Family, name: str, known: set[tuple[Any, str]]) -> UserError:
    word = FAMILY_WORDS[family]
    listed = ", ".join(sorted(n for fam, n in known if fam == family))
    elsewhere = [_article(word) for fam, word in FAMILY_WORDS.items() if (fam, name) in known]
    if elsewhere:
        return UserError(
            f"{name!r} is registered as {' and '.join(elsewhere)}, not {_article(word)} (registered: {listed})"
        )
    return UserError(f"unknown {word} {name!r} (registered: {listed})")


def _article(word: str) -> str:
    return f"{'an' if word[0] in 'aeiou' else 'a'} {word}"
