"""Environment suites for `temper eval run agent:<suite>` (the second tier of evaluation).

    temper eval run agent:tool_arith agent:workspace --model runs/NAME/final --out evals/agent

An agent suite is the held-out split of a built-in agent suite (or `agent:PATH.jsonl`),
run greedily through `agent_rollout` (the path training samples through) for each seed.
Reported per suite and tier (`tier_summary`, from the samples rows): the dimensions
`DIMENSIONS` (completion, steps used, invalid calls, recovery rate after an error, environment
left intact, safe), each with a task-bootstrap CI (tasks resampled, seeds averaged per task
first); tool errors, unsafe calls, sandbox seconds and timeouts, env errors; and per turn the
share of turns with an invalid call. Written to `OUT/agent_results.json`.

Each suite is also a `SuiteResult` (`suite_result_from_records`: track "agent", primary metric
`completion`, every dimension beside it overall and per tier as `<dim>_tier<N>`, per-task
scores over seeds) that goes into `results.json` with the other suites, so `temper eval
compare`, the gate (`no significant regression on agent:workspace.recovery_tier2`) and the HTML
report read agent suites like any other; one row per episode goes into `samples.jsonl`.
Episodes the environment failed are left out of every metric and counted as verifier errors.
Results are cached like plain suites' (`evals.cache`: model hash, suite hash, settings).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tempering.atomic import write_text_atomic
from tempering.config import EngineSettings
from tempering.errors import UserError

PREFIX = "agent:"


def is_agent_suite(name: str) -> bool:
    return name.startswith(PREFIX)


def heldout_tasks(name: str, limit: int | None = None) -> list[Any]:
    """The held-out tasks an agent suite (`agent:<builtin>` or `agent:PATH.jsonl`) is evaluated on.

    Raises:
        UserError: an unknown suite, a task file that does not load, or one without held-out tasks.
    """
    from tempering.agents.suites import load_agent_suite
    from tempering.agents.tasks import select

    tasks = select(load_agent_suite(name.removeprefix(PREFIX)), "heldout")[:limit]
    if not tasks:
        raise UserError(f"agent suite {name.removeprefix(PREFIX)!r} has no held-out tasks")
    return tasks


def agent_suite_digest(name: str) -> str:
    """A hash of every task of an agent suite as loaded (fixture folders read in): what a pipeline
    stage's identity holds for `agent:<suite>`, so an edited task file is a new hash.

    Raises:
        UserError: the suite does not load.
    """
    from tempering.agents.suites import load_agent_suite

    return suite_hash(load_agent_suite(name.removeprefix(PREFIX)))


def summary_lines(results: dict[str, Any]) -> list[str]:
    """One progress line per suite and tier of `run_agent_suites`' summary."""
    return [
        f"{name} tier {tier}: completion {m['completion_rate']:.3f} [{m['ci_low']:.3f}, "
        f"{m['ci_high']:.3f}] over {m['tasks']} tasks; steps {m['steps']:.2f}, invalid calls "
        f"{m['invalid_calls']:.2f}, recovery {m['recovery_rate']:.2f}, intact {m['intact_rate']:.2f}, "
        f"env errors {m['env_errors']}"
        for name, tiers in results["suites"].items()
        for tier, m in tiers.items()
    ]


AGENT_RUNNER_VERSION = 1
"""Part of an agent suite's cache key: bump when the episodes or the metrics change."""

DIMENSIONS = ("completion", "steps", "invalid_calls", "recovery", "intact", "safe")
"""Per-episode scores of an agent suite: `completion` (the goal met), `steps` (turns used),
`invalid_calls` (malformed / unknown / invalid calls), `recovery` (success, over episodes with at
least one error only), `intact` (protected files unchanged), `safe` (no `safe_actions` flag)."""


def task_scores(records: list[dict[str, Any]], dimension: str, tier: int | None = None) -> dict[str, list[float]]:
    """Task id -> per-episode scores of one dimension over the scored episodes (of `tier`).
    `recovery` holds only the episodes that made an error, so a task without one is absent."""
    out: dict[str, list[float]] = {}
    for r in records:
        if r["status"] != "scored" or (tier is not None and r["tier"] != tier):
            continue
        if dimension == "recovery" and not r["errors"]:
            continue
        value = {
            "completion": float(r["passed"]),
            "recovery": float(r["passed"]),
            "intact": float(r["intact"]),
            "safe": float(r["unsafe_actions"] == 0),
        }.get(dimension)
        out.setdefault(r["task_id"], []).append(float(r[dimension]) if value is None else value)
    return out


def tier_summary(records: list[dict[str, Any]], tier: int | None = None) -> dict[str, Any]:
    """One tier's (None: all) dimensions from samples rows: each mean with a task-bootstrap CI
    (`<dim>` and `<dim>_ci`), and the counts `episodes`, `env_errors`, `tasks`."""
    from tempering.evals.stats import bootstrap_ci

    rows = [r for r in records if tier is None or r["tier"] == tier]
    scored = [r for r in rows if r["status"] == "scored"]
    out: dict[str, Any] = {
        "episodes": len(rows),
        "env_errors": len(rows) - len(scored),
        "tasks": len({r["task_id"] for r in scored}),
        "episodes_with_error": sum(1 for r in scored if r["errors"]),
    }
    for dim in DIMENSIONS:
        scores = task_scores(records, dim, tier)
        if not scores:
            out[dim], out[f"{dim}_ci"] = None, None
            continue
        est = bootstrap_ci(list(scores.values()))
        out[dim], out[f"{dim}_ci"] = est.mean, [est.low, est.high]
    n = max(len(scored), 1)
    turns = sum(r["steps"] for r in scored)
    out.update(
        # the names `temper eval run` has always printed and earlier agent_results.json files hold
        completion_rate=out["completion"] or 0.0,
        ci_low=(out["completion_ci"] or [0.0, 0.0])[0],
        ci_high=(out["completion_ci"] or [0.0, 0.0])[1],
        recovery_rate=out["recovery"] or 0.0,
        intact_rate=out["intact"] or 0.0,
        safe_rate=out["safe"] or 0.0,
        tool_errors=sum(r["tool_errors"] for r in scored) / n,
        unsafe_actions=sum(r["unsafe_actions"] for r in scored) / n,
        invalid_calls_per_turn=sum(r["invalid_calls"] for r in scored) / max(turns, 1),
        sandbox_s=sum(r["sandbox_s"] for r in scored) / n,
        sandbox_timeouts=float(sum(r["sandbox_timeouts"] for r in scored)),
    )
    return out


def episode_record(name: str, seed: int, e: Any) -> dict[str, Any]:
    """One `samples.jsonl` row of an agent suite: what the episode did, no transcript."""
    st = e.stats
    return {
        "suite": name,
        "task_id": e.task.id,
        "tier": e.task.tier,
        "seed": seed,
        "passed": bool(st.success),
        "status": st.status,
        "steps": st.steps,
        "invalid_calls": st.invalid_calls,
        "tool_errors": st.tool_errors,
        "errors": st.errors,
        "recovered": bool(st.recovered),
        "intact": st.intact,
        "unsafe_actions": st.unsafe_actions,
        "unsafe_reasons": st.unsafe_reasons,
        "sandbox_s": st.sandbox_s,
        "sandbox_timeouts": st.sandbox_timeouts,
        "detail": st.error,
    }


def suite_hash(tasks: list[Any]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(sorted(t.model_dump_json() for t in tasks)).encode()).hexdigest()[:16]


def agent_suite_result(
    name: str, tasks: list[Any], episodes: list[tuple[int, Any]], model_id: str, sampling: dict[str, Any]
) -> tuple[Any, list[dict[str, Any]]]:
    """(SuiteResult, samples.jsonl rows) of one agent suite from its (seed, episode) pairs."""
    records = [episode_record(name, seed, e) for seed, e in episodes]
    return suite_result_from_records(name, tasks, records, model_id, sampling), records


def suite_result_from_records(
    name: str, tasks: list[Any], records: list[dict[str, Any]], model_id: str, sampling: dict[str, Any]
) -> Any:
    """The `SuiteResult` of an agent suite: primary `completion`; every dimension overall and per
    tier (`completion_tier2`, `recovery_tier3`, ...) with per-task scores, so the gate and
    `temper eval compare` read each. A dimension no episode has (no error: no `recovery`) is left
    out with a note."""
    from tempering.evals.results import MetricResult, SuiteResult

    if not task_scores(records, "completion"):
        raise ValueError(f"agent suite {name}: every episode ended in an environment error")
    env_errors = sum(1 for r in records if r["status"] != "scored")
    tiers = sorted({r["tier"] for r in records})
    scores: dict[str, dict[str, list[float]]] = {}
    notes = [f"{env_errors} episode(s) ended in an environment error: left out of every metric"] if env_errors else []
    for tier in [None, *tiers] if len(tiers) > 1 else [None]:
        for dim in DIMENSIONS:
            metric = dim if tier is None else f"{dim}_tier{tier}"
            per_task = task_scores(records, dim, tier)
            if per_task:
                scores[metric] = per_task
            elif tier is None:
                notes.append(f"{metric}: no episode to score (no episode made an error)")
    result = SuiteResult(
        suite=name,
        suite_hash=suite_hash(tasks),
        track="agent",
        model_id=model_id,
        sampling=sampling,
        metrics={m: MetricResult.from_scores(m, list(v.values())) for m, v in scores.items()},
        primary_metric="completion",
        task_scores=scores["completion"],
        metric_task_scores={m: v for m, v in scores.items() if m != "completion"},
        verifier_errors=env_errors,
        notes=notes,
    )
    return result


def run_agent_suites(
    model_spec: str,
    names: list[str],
    out: Path,
    *,
    seeds: int = 1,
    first_seed: int = 0,
    limit: int | None = None,
    precision: str = "auto",
    max_new_tokens: int = 48,
    max_context_tokens: int = 1024,
    engine_settings: EngineSettings | None = None,
    cache: bool = True,
    log: Any = None,
) -> dict[str, Any]:
    """Evaluate a model on agent suites; returns (and writes `agent_results.json`) the per-tier
    summary (`tier_summary`), with the `SuiteResult`s under "suite_results" and samples rows under
    "records". `engine_settings`: the engine that samples the episodes (None: the static-batch
    HFEngine). `cache`: reuse a suite's result (and rows) cached under the model's hash, the
    suite's hash and the settings (`evals.cache`), as plain suites do; a model that is not a local
    directory has no hash and is not cached."""
    from tempering.evals.cache import ResultCache, cache_key, default_cache_dir, model_dir_hash
    from tempering.models.load import ModelNotFound

    suites = {name: heldout_tasks(name, limit) for name in names}
    settings: dict[str, Any] = {
        "temperature": 0.0,
        "max_new_tokens": max_new_tokens,
        "max_context_tokens": max_context_tokens,
        "seeds": list(range(first_seed, first_seed + seeds)),
        "precision": precision,
        "engine": (engine_settings or EngineSettings(kind="hf")).model_dump(mode="json"),
    }
    store = None
    if cache:
        try:
            model_hash = model_dir_hash(model_spec)
            store = ResultCache(default_cache_dir())
        except (ModelNotFound, OSError):
            model_hash = None
    keys = {
        name: cache_key(runner=f"agent-{AGENT_RUNNER_VERSION}", model=model_hash, suite=suite_hash(tasks), **settings)
        for name, tasks in suites.items()
        if store is not None
    }
    found = {name: hit for name, key in keys.items() if store is not None and (hit := store.get(key)) is not None}
    for name in found:
        (log or (lambda _: None))(f"{name}: cached result ({keys[name][:12]})")
    results: dict[str, Any] = {"model": model_spec, "precision": precision, "seeds": seeds, "suites": {}}
    suite_results, records = [], []
    todo = {name: tasks for name, tasks in suites.items() if name not in found}
    ran = _run(model_spec, todo, settings, engine_settings, precision) if todo else {}
    for name, tasks in suites.items():
        if name in found:
            result, rows = found[name]
        else:
            result, rows = agent_suite_result(name, tasks, ran[name], model_spec, ran["_settings"])
            if store is not None:
                store.put(keys[name], result, rows)
        suite_results.append(result)
        records += rows
        tiers = sorted({r["tier"] for r in rows})
        results["suites"][name] = {str(t): tier_summary(rows, t) for t in tiers} | {"all": tier_summary(rows)}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "agent_results.json", json.dumps(results, indent=1))
    return {**results, "suite_results": suite_results, "records": records}


def _run(
    model_spec: str,
    suites: dict[str, list[Any]],
    settings: dict[str, Any],
    engine_settings: EngineSettings | None,
    precision: str,
) -> dict[str, Any]:
    """Sample every suite's episodes: name -> [(seed, episode)], and "_settings" (the engine's precision)."""
    from tempering.agents.render import AgentRenderer
    from tempering.agents.rollout import EpisodeSettings, agent_rollout
    from tempering.config import SamplingSettings
    from tempering.models.load import load_tokenizer
    from tempering.rollout.select import load_engine

    engine = load_engine(engine_settings or EngineSettings(kind="hf"), model_spec, precision)
    renderer = AgentRenderer(load_tokenizer(model_spec))
    sampling = SamplingSettings(temperature=0.0, max_new_tokens=settings["max_new_tokens"])
    episode = EpisodeSettings(max_context_tokens=settings["max_context_tokens"])
    sandbox = None
    if any(t.needs_sandbox for ts in suites.values() for t in ts):
        from tempering.sandbox import SandboxPool

        sandbox = SandboxPool(size=4)
    out: dict[str, Any] = {
        "_settings": {**settings, "precision": engine.precision, "engine": type(engine).__name__},
    }
    try:
        for name, tasks in suites.items():
            out[name] = [
                (seed, g[0])
                for seed in settings["seeds"]
                for g in agent_rollout(tasks, engine, renderer, sandbox, sampling, episode, seed=seed).groups
            ]
    finally:
        if sandbox is not None:
            sandbox.close()
    return out
