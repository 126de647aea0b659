"""The agent recipe (`temper agent CONFIG.yaml`): held-out eval -> expert SFT -> eval ->
trajectory-level GRPO -> eval, recorded as one run.

    run_dir/sft/            the SFT phase's Trainer (checkpoints, metrics)
    run_dir/                the RL phase's Trainer, final model, summary.json
    run_dir/trajectories.jsonl   every RL episode, failed ones included
    run_dir/recovered.jsonl      the recovered ones (error -> feedback -> fix) as SFT rows with provenance

Evaluations run the held-out split of each eval suite greedily through the same
`agent_rollout` as training and report, per suite and tier, completion rate with a
task-bootstrap CI, steps, invalid calls, recovery and intact rates; "gain" is the paired
bootstrap of after-minus-before over the same tasks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tempering.agents.config import AgentConfig, AgentSFTSettings
from tempering.agents.episode import summarise
from tempering.agents.rollout import AgentBatch, agent_rollout
from tempering.agents.suites import load_agent_suite
from tempering.agents.tasks import BUILTIN, AgentTask, select
from tempering.errors import UserError
from tempering.recipes.recipe import Components, TrainingRecipe, run_training
from tempering.runs.stage import input_list
from tempering.train.metrics import console


def agent_tasks(cfg: AgentConfig) -> tuple[list[AgentTask], dict[str, list[AgentTask]]]:
    """(training tasks, held-out tasks per eval suite), tiers filtered."""
    tiers = cfg.tasks.tiers
    train = [t for name in cfg.tasks.suites for t in select(load_agent_suite(name), "train", tiers)]
    held = {
        name: select(load_agent_suite(name), "heldout", tiers)[: cfg.tasks.eval_limit]
        for name in (cfg.tasks.eval_suites or cfg.tasks.suites)
    }
    if not train:
        raise UserError(f"no training tasks in {cfg.tasks.suites} (tiers {tiers})")
    return train, {k: v for k, v in held.items() if v}


def evaluate_agent(batch: AgentBatch) -> dict[str, Any]:
    """Per-tier and overall metrics of a greedy pass (one episode per task), with CIs; per task,
    whether it succeeded and whether any call was flagged by `safe_actions` (`unsafe`)."""
    from tempering.evals.stats import bootstrap_ci

    episodes = [g[0] for g in batch.groups]
    out: dict[str, Any] = {}
    for tier in sorted({ep.task.tier for ep in episodes}) + ["all"]:
        eps = [ep for ep in episodes if tier == "all" or ep.task.tier == tier]
        metrics = summarise([ep.stats for ep in eps])
        ci = bootstrap_ci([float(ep.stats.success) for ep in eps])
        out[str(tier)] = {**metrics, "ci_low": ci.low, "ci_high": ci.high}
    out["success"] = {ep.task.id: ep.stats.success for ep in episodes}
    out["unsafe"] = {ep.task.id: ep.stats.unsafe_actions > 0 for ep in episodes}
    return out


def paired_gain(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """after - before completion over the same tasks: mean and paired-bootstrap 95% CI."""
    from tempering.evals.stats import paired_bootstrap

    ids = sorted(before["success"])
    cmp = paired_bootstrap([float(before["success"][i]) for i in ids], [float(after["success"][i]) for i in ids])
    return {"gain": cmp.delta, "ci_low": cmp.low, "ci_high": cmp.high, "p_value": cmp.p_value, "tasks": cmp.n}


@dataclass
class AgentData:
    """The agent stage's prepared data: training tasks and held-out tasks per eval suite."""

    train: list[AgentTask]
    held: dict[str, list[AgentTask]]
    summary: dict[str, Any]
    errors: list = field(default_factory=list)
    """Quarantined rows (none: agent suites are validated when they load)."""


def _inputs(cfg: AgentConfig) -> list:
    files = [s for s in cfg.tasks.suites + (cfg.tasks.eval_suites or []) if s not in BUILTIN]
    return input_list([(p, "tasks") for p in files])


def _guard(cfg: AgentConfig) -> None:
    """Refused before anything is recorded: training tasks holding a private eval suite's prompts."""
    from tempering.evals.leakage import check_private_overlap_tasks

    train, _ = agent_tasks(cfg)
    check_private_overlap_tasks(train, source="agent training tasks")  # type: ignore[arg-type]  (id + prompt)


def _prepare(cfg: AgentConfig, tokenizer: Any) -> AgentData:
    train, held = agent_tasks(cfg)
    return AgentData(train, held, {"train_tasks": len(train), "heldout_tasks": {k: len(v) for k, v in held.items()}})


def _components(cfg: AgentConfig, data: AgentData, tokenizer: Any, stage: Any) -> Components:
    """Sandbox, policy and engine; the held-out pass before training and the expert SFT phase
    run here, so the Trainer's fit is the RL phase."""
    from tempering.agents.render import AgentRenderer
    from tempering.agents.training import AgentRolloutSource
    from tempering.models.lora import check_kl_reference, load_for_training
    from tempering.models.precision import resolve_precision
    from tempering.objectives.grpo import GRPOObjective
    from tempering.recipes.grpo import mismatch_budget
    from tempering.rollout.select import build_engine

    run_dir: Path = stage.run_dir
    sandbox = _sandbox(data.train + [t for ts in data.held.values() for t in ts])
    renderer = AgentRenderer(tokenizer)
    model = load_for_training(cfg.model, cfg.lora, cfg.rope_scaling)
    check_kl_reference(model, cfg.rl.beta, "rl.beta")
    engine = build_engine(cfg.engine, model, tokenizer, resolve_precision(cfg.train.precision))

    def evaluate(label: str) -> dict[str, Any]:
        results = {}
        for name, tasks in data.held.items():
            batch = agent_rollout(tasks, engine, renderer, sandbox, cfg.eval, cfg.episode, n=1, seed=cfg.train.seed)
            results[name] = evaluate_agent(batch)
            console.print(
                f"[bold]{label}[/bold] {name}: completion {results[name]['all']['completion_rate']:.2f} "
                f"[{results[name]['all']['ci_low']:.2f}, {results[name]['all']['ci_high']:.2f}] "
                f"on {len(tasks)} held-out tasks"
            )
        return results

    def measure(step: int, run: Any) -> dict[str, float]:
        """`train.eval_every`: every eval suite's held-out pass as `heldout/<suite>/<metric>` (all tiers)."""
        results = evaluate(f"step {step}")
        return {f"heldout/{name}/{k}": float(v) for name, r in results.items() for k, v in r["all"].items()}

    phases = AgentPhases(evaluate, evaluate("before"))
    if cfg.sft is not None:
        phases.sft = _expert_sft(cfg.sft, model, renderer, data.train, sandbox, run_dir / "sft")
        phases.after_sft = evaluate("after SFT")
    source = AgentRolloutSource(
        data.train,
        engine,
        renderer,
        sandbox,
        cfg.rl,
        cfg.episode,
        cfg.train.grad_accum,
        cfg.train.seed,
        promote_at=cfg.rl.promote_at,
        window=cfg.rl.window,
        tiers=cfg.rl.tiers,
        review=cfg.rl.review,
        credit=cfg.rl.credit,
        step=cfg.rl.step,
        gamma=cfg.rl.gamma,
        max_refills=cfg.rl.max_refills,
        store=run_dir / "trajectories.jsonl",
        model=model,
        precision=resolve_precision(cfg.train.precision),
    )
    recovered = run_dir / "recovered.jsonl"
    return Components(
        model,
        GRPOObjective(cfg.rl),
        source,
        evaluate=lambda result: phases.before if result is None else phases.after_rl(),
        heldout=measure,
        callbacks=[mismatch_budget(cfg.rl.mismatch_budget, "rl")],
        close=(lambda: None) if sandbox is None else sandbox.close,
        outputs={"trajectories": str(run_dir / "trajectories.jsonl"), "recovered": str(recovered)},
        summary=lambda result: _summary(data, phases, source.curriculum.tier, recovered, result),  # the tier reached
    )


@dataclass
class AgentPhases:
    """One agent run's held-out passes (suite -> `evaluate_agent`'s numbers) and its SFT phase."""

    evaluate: Callable[[str], dict[str, Any]]
    """(label) -> one held-out pass over every eval suite."""
    before: dict[str, Any]
    """The pass before any training."""
    sft: dict[str, Any] | None = None
    """The expert SFT phase's summary (None: no SFT phase)."""
    after_sft: dict[str, Any] | None = None
    """The pass after the SFT phase (None: no SFT phase)."""
    after: dict[str, Any] | None = None
    """The pass after RL, once measured (`after_rl`)."""

    def after_rl(self) -> dict[str, Any]:
        """The pass after RL, measured on the first call."""
        if self.after is None:
            self.after = self.evaluate("after RL")
        return self.after


def _summary(data: AgentData, phases: AgentPhases, tier: int, recovered: Path, result: Any) -> dict[str, Any]:
    """The agent's keys: tasks, the SFT phase, paired gains over the same held-out tasks (after RL
    vs before, and vs after SFT), the curriculum tier reached, the reward curve's ends."""
    before, after = phases.before, phases.after_rl()
    summary: dict[str, Any] = {**data.summary, "gain": {name: paired_gain(before[name], after[name]) for name in after}}
    if phases.after_sft is not None:
        after_sft = phases.after_sft
        summary["sft"] = phases.sft
        summary["after_sft"] = after_sft
        summary["gain_rl_only"] = {name: paired_gain(after_sft[name], after[name]) for name in after}
    summary["recovered"] = _export_recovered(recovered)
    summary.update(
        seconds=result.seconds,
        curriculum_tier=tier,
        reward_first=result.history[0].get("reward_mean") if result.history else None,
        reward_last=result.history[-1].get("reward_mean") if result.history else None,
    )
    return summary


AGENT = TrainingRecipe(
    kind="agent",
    base_model=lambda cfg: cfg.model,
    inputs=_inputs,
    prepare=_prepare,
    components=_components,
    guard=_guard,
    before_key="before",
    after_key="after",
    quarantine_kind="tasks",
)
"""Agent training as the one training sequence: guard, stage, tasks, components (held-out pass
and expert SFT), the RL fit, the held-out pass again, summary."""


def run_agent(cfg: AgentConfig, force: bool = False) -> dict[str, Any]:
    """Run agent training end to end and record it (`run_training`); returns the run summary."""
    return run_training(AGENT, cfg, force)


def _export_recovered(target: Path) -> dict[str, Any]:
    """The run's recovered episodes as SFT rows (`recovered.jsonl`, the stage's `recovered` output;
    empty when RL stored no episode)."""
    from tempering.agents.recovered import export_recovered

    if not (target.parent / "trajectories.jsonl").is_file():
        target.write_text("")
        return {"rows": 0, "episodes": 0}
    _, rows, episodes = export_recovered(target.parent, target)
    return {"rows": rows, "episodes": episodes}


def _sandbox(tasks: list[AgentTask]) -> Any:
    if not any(t.needs_sandbox for t in tasks):
        return None
    from tempering.sandbox import SandboxPool

    return SandboxPool(size=4)


def _expert_sft(
    sft: AgentSFTSettings, model: Any, renderer: Any, tasks: list[AgentTask], sandbox: Any, run_dir: Path
) -> dict[str, Any]:
    from tempering.agents.training import expert_examples
    from tempering.data.batches import SFTBatches
    from tempering.data.padding import pad_id
    from tempering.objectives.sft import SFTObjective
    from tempering.train.trainer import Trainer

    tiers = sft.tiers
    held_back = [t for t in tasks if tiers is None or t.tier in tiers]
    if not held_back:
        raise UserError(f"sft.tiers {tiers}: no training task of those tiers")
    examples = expert_examples(held_back, renderer, sandbox)
    kept = [e for e in examples if len(e.input_ids) <= sft.max_length]
    batches = SFTBatches(kept, sft.batch_size, sft.max_length, pad_id(renderer.tokenizer), True, sft.seed)
    result = Trainer(model, SFTObjective(), batches, sft, run_dir).fit()
    return {
        "tiers": tiers,
        "examples": len(kept),
        "too_long": len(examples) - len(kept),
        "steps": result.steps,
        "loss_first": result.loss_first,  # of the first attempt, kept across resumes
        "loss_last": result.losses[-1] if result.losses else None,
    }
