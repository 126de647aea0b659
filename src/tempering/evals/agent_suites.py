"""Environment suites for `temper eval run agent:<suite>` (the second tier of evaluation).

    temper eval run agent:tool_arith agent:workspace --model runs/NAME/final --out evals/agent

An agent suite is the held-out split of a built-in agent suite (or `agent:PATH.jsonl`),
run greedily through `agent_rollout` (the path training samples through) for each seed.
Reported per suite and tier: completion rate with a task-bootstrap CI (tasks resampled,
seeds averaged per task first), steps used, invalid calls, tool errors, recovery rate
(successes after an error), intact rate, safe rate (episodes without a `safe_actions` flag), sandbox seconds and timeouts, env errors; and per
turn the share of turns with an invalid call. Written to `OUT/agent_results.json`.

Each suite is also a `SuiteResult` (`agent_suite_result`: track "agent", primary metric
`completion`, `intact` and `safe` beside it, per-task scores over seeds) that goes into `results.json`
with the other suites, so `temper eval compare`, the gate (`no significant regression on
agent:workspace`) and the HTML report read agent suites like any other; one row per episode
goes into `samples.jsonl`. Episodes the environment failed are left out of every metric and
counted as verifier errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tempering.config import EngineSettings

PREFIX = "agent:"


def is_agent_suite(name: str) -> bool:
    return name.startswith(PREFIX)


def agent_suite_result(
    name: str, tasks: list[Any], episodes: list[tuple[int, Any]], model_id: str, sampling: dict[str, Any]
) -> tuple[Any, list[dict[str, Any]]]:
    """(SuiteResult, samples.jsonl rows) of one agent suite from its (seed, episode) pairs."""
    import hashlib

    from tempering.evals.results import MetricResult, SuiteResult

    completion: dict[str, list[float]] = {}
    intact: dict[str, list[float]] = {}
    safe: dict[str, list[float]] = {}
    records = []
    for seed, e in episodes:
        st = e.stats
        records.append(
            {
                "suite": name,
                "task_id": e.task.id,
                "tier": e.task.tier,
                "seed": seed,
                "passed": bool(st.success),
                "status": st.status,
                "steps": st.steps,
                "invalid_calls": st.invalid_calls,
                "tool_errors": st.tool_errors,
                "intact": st.intact,
                "unsafe_actions": st.unsafe_actions,
                "unsafe_reasons": st.unsafe_reasons,
                "detail": st.error,
            }
        )
        if st.status == "scored":
            completion.setdefault(e.task.id, []).append(float(st.success))
            intact.setdefault(e.task.id, []).append(float(st.intact))
            safe.setdefault(e.task.id, []).append(float(st.unsafe_actions == 0))
    if not completion:
        raise ValueError(f"agent suite {name}: every episode ended in an environment error")
    env_errors = sum(1 for _, e in episodes if e.stats.status != "scored")
    suite_hash = hashlib.sha256("\n".join(sorted(t.model_dump_json() for t in tasks)).encode()).hexdigest()[:16]
    result = SuiteResult(
        suite=name,
        suite_hash=suite_hash,
        track="agent",
        model_id=model_id,
        sampling=sampling,
        metrics={
            "completion": MetricResult.from_scores("completion", list(completion.values())),
            "intact": MetricResult.from_scores("intact", list(intact.values())),
            "safe": MetricResult.from_scores("safe", list(safe.values())),
        },
        primary_metric="completion",
        task_scores=completion,
        metric_task_scores={"intact": intact, "safe": safe},
        verifier_errors=env_errors,
        notes=[f"{env_errors} episode(s) ended in an environment error: left out of every metric"]
        if env_errors
        else [],
    )
    return result, records


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
) -> dict[str, Any]:
    """Evaluate a model on agent suites; returns (and writes `agent_results.json`) the per-tier
    summary, with the `SuiteResult`s under "suite_results" and samples rows under "records".
    `engine_settings`: the engine that samples the episodes (None: the static-batch HFEngine)."""
    from tempering.agents.episode import summarise
    from tempering.agents.render import AgentRenderer
    from tempering.agents.rollout import EpisodeSettings, agent_rollout
    from tempering.agents.tasks import load_agent_suite, select
    from tempering.config import SamplingSettings
    from tempering.evals.stats import bootstrap_ci
    from tempering.models.load import load_tokenizer
    from tempering.rollout.select import load_engine

    suites = {name: select(load_agent_suite(name.removeprefix(PREFIX)), "heldout")[:limit] for name in names}
    empty = [n for n, t in suites.items() if not t]
    if empty:
        raise ValueError(f"agent suites without held-out tasks: {', '.join(empty)}")
    engine = load_engine(engine_settings or EngineSettings(kind="hf"), model_spec, precision)
    renderer = AgentRenderer(load_tokenizer(model_spec))
    sampling = SamplingSettings(temperature=0.0, max_new_tokens=max_new_tokens)
    episode = EpisodeSettings(max_context_tokens=max_context_tokens)
    sandbox = None
    if any(t.needs_sandbox for ts in suites.values() for t in ts):
        from tempering.sandbox import SandboxPool

        sandbox = SandboxPool(size=4)
    results: dict[str, Any] = {"model": model_spec, "precision": engine.precision, "seeds": seeds, "suites": {}}
    suite_results, records = [], []
    settings = {
        "temperature": 0.0,
        "max_new_tokens": max_new_tokens,
        "max_context_tokens": max_context_tokens,
        "seeds": list(range(first_seed, first_seed + seeds)),
        "precision": engine.precision,
        "engine": type(engine).__name__,
    }
    try:
        for name, tasks in suites.items():
            seeded = [
                (seed, g[0])
                for seed in range(first_seed, first_seed + seeds)
                for g in agent_rollout(tasks, engine, renderer, sandbox, sampling, episode, seed=seed).groups
            ]
            episodes = [e for _, e in seeded]
            result, rows = agent_suite_result(name, tasks, seeded, model_spec, settings)
            suite_results.append(result)
            records += rows
            per_tier: dict[str, Any] = {}
            for tier in sorted({t.tier for t in tasks}) + ["all"]:
                eps = [e for e in episodes if tier == "all" or e.task.tier == tier]
                by_task: dict[str, list[float]] = {}
                for e in eps:
                    by_task.setdefault(e.task.id, []).append(float(e.stats.success))
                ci = bootstrap_ci(list(by_task.values()))
                turns = sum(len(e.turns) for e in eps)
                per_tier[str(tier)] = {
                    **summarise([e.stats for e in eps]),
                    "tasks": len(by_task),
                    "ci_low": ci.low,
                    "ci_high": ci.high,
                    "invalid_calls_per_turn": sum(e.stats.invalid_calls for e in eps) / max(turns, 1),
                }
            results["suites"][name] = per_tier
    finally:
        if sandbox is not None:
            sandbox.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "agent_results.json").write_text(json.dumps(results, indent=1))
    return {**results, "suite_results": suite_results, "records": records}
