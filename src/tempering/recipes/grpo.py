"""The GRPO recipe: tasks -> rollouts -> verifiers -> the one Trainer -> recorded run.

Held-out monitoring is an eval suite: the held-out tasks (with the run's reward applied)
become a `Suite` (named `tasks`) that the suite runner evaluates at the start, every
`train.eval_every` steps and at the end, exactly as `temper eval run` would (same sampling,
seeds, scoring and failure policy), writing `heldout/step-NNNNNN/{results,samples}` in the run
dir. Each reward part is reported as its own rate (e.g. `correct` = final-answer accuracy,
`strict` = the reply is just the answer). The numbers go to the run's one held-out monitor
(`recipes.monitor`) as `heldout/tasks/<metric>`, so `train.keep_best` and `early_stopping`
watch them as they watch SFT's `eval_loss`. Without `heldout.tasks`, a seeded split of the
training tasks is held out (disjoint from training, recorded in `heldout/split.json`). When the
training reward rises over the last `alarm_window` evaluations while the held-out reward does
not, the run logs an `alarm` event (reward hacking or overfitting).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tempering.algorithms import import_plugins
from tempering.atomic import write_text_atomic
from tempering.config import GRPOConfig
from tempering.errors import UserError
from tempering.evals.suite import Suite
from tempering.recipes.recipe import Components, TrainingRecipe, run_training
from tempering.rollout.engine import Engine
from tempering.runs.stage import input_list
from tempering.tracking.context import RunContext
from tempering.train.metrics import console
from tempering.types import Task

if TYPE_CHECKING:
    from tempering.rollout.domains import DomainSchedule

HELDOUT_METRICS = ["mean_reward", "accuracy"]
"""The held-out suite's metrics: the first (mean reward) is the `reward` the alarm watches."""
HELDOUT_SUITE = "tasks"
"""The held-out suite's name: its numbers are `heldout/tasks/<metric>` (`train.keep_best` may name one)."""


def heldout_suite(cfg: GRPOConfig, tasks: list[Task]) -> Suite:
    """The held-out tasks as an eval suite under the run's held-out sampling settings."""
    from tempering.evals.suite import SuiteSampling

    h = cfg.heldout
    assert h is not None, "a held-out suite needs the config's heldout: section"
    sampling = SuiteSampling(
        n=1, **{k: getattr(h, k) for k in ("temperature", "top_p", "max_new_tokens", "stop_token_ids", "stop")}
    )
    return Suite.of_tasks(
        HELDOUT_SUITE,
        tasks,
        h.tasks or (cfg.domains[0].tasks if cfg.domains else cfg.tasks),
        sampling=sampling,
        metrics=HELDOUT_METRICS,
        description="GRPO held-out monitor",
    )


def split_heldout(tasks: list[Task], size: int, seed: int) -> tuple[list[Task], list[Task]]:
    """(training, held-out): a seeded split, `size` tasks held out (at most a fifth of them).

    Training keeps no task whose prompt a held-out task has, so the two never overlap.
    Raises:
        ValueError: fewer than 5 tasks (nothing sensible to hold out).
    """
    n = min(size, len(tasks) // 5)
    if n < 1:
        raise UserError(f"{len(tasks)} training tasks are too few to hold some out; set heldout.tasks")
    order = list(range(len(tasks)))
    random.Random(f"heldout:{seed}").shuffle(order)
    held = [tasks[i] for i in sorted(order[:n])]
    prompts = {json.dumps(t.chat(), sort_keys=True) for t in held}
    train = [
        t
        for i, t in enumerate(tasks)
        if i not in set(order[:n]) and json.dumps(t.chat(), sort_keys=True) not in prompts
    ]
    return train, held


def heldout_tasks(cfg: GRPOConfig, tasks: list[Task], run_dir: Path) -> tuple[list[Task], list[Task]]:
    """(training tasks, held-out tasks) for the run: the configured held-out set, else a split.

    Raises:
        ValueError: configured held-out prompts also appear in the training tasks.
    """
    from tempering.sources.tasks import load_tasks, with_reward

    if cfg.heldout is None:
        return tasks, []
    if cfg.heldout.tasks is not None:
        held = with_reward(load_tasks(cfg.heldout.tasks), cfg.reward)
        overlap = {json.dumps(t.chat(), sort_keys=True) for t in held} & {
            json.dumps(t.chat(), sort_keys=True) for t in tasks
        }
        if overlap:
            raise UserError(f"{len(overlap)} held-out prompts also appear in the training tasks")
        return tasks, held
    train, held = split_heldout(tasks, cfg.heldout.split_size, cfg.train.seed)
    record = {
        "from": cfg.tasks.source,
        "seed": cfg.train.seed,
        "heldout": len(held),
        "train": len(train),
        "heldout_ids": [t.id for t in held],
    }
    (run_dir / "heldout").mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "heldout" / "split.json", json.dumps(record, indent=1))
    console.print(
        f"[cyan]held-out: {len(held)} of the {len(tasks)} training tasks (seeded split, "
        f"{run_dir / 'heldout' / 'split.json'})[/cyan]"
    )
    return train, held


def heldout_eval(
    engine: Engine,
    suite: Suite,
    weights: dict[str, float],
    *,
    seed: int = 0,
    out_dir: Path | None = None,
    model_id: str = "policy",
    by_domain: bool = False,
) -> dict[str, float]:
    """Run the held-out suite (the eval suite runner); mean reward, accuracy, per-part rates, truncation.

    With `out_dir`, writes results.json and samples.jsonl there, as `temper eval run` does;
    `by_domain`: also each domain's accuracy and reward (`domain/<name>/...`; multi-domain runs).
    """
    from tempering.evals.evaluate import write_eval_outputs
    from tempering.evals.results import EvalResults
    from tempering.evals.runner import run_suite_samples

    result, records = run_suite_samples(suite, engine, first_seed=seed, model_id=model_id, model_hash=model_id)
    if out_dir is not None:
        write_eval_outputs(out_dir, EvalResults(model=model_id, suites=[result]), records, report=False)
    scored = [r for r in records if r["status"] == "scored"] or [{"components": {}}]
    out = {
        "reward": result.metrics["mean_reward"].mean,
        "accuracy": result.metrics["accuracy"].mean,
        "truncation_rate": result.truncation_rate or 0.0,
        "verifier_errors": result.verifier_errors,
    }
    for name, weight in weights.items():
        out[name] = sum(r["components"].get(name, 0.0) for r in scored) / len(scored) / (weight or 1.0)
    if by_domain:
        from tempering.recipes.domains import heldout_by_domain

        out.update(heldout_by_domain(records))
    return out


class GRPOHeldout:
    """GRPO's held-out measure (`Components.heldout`): the held-out suite at a step, the divergence
    alarm, and the curves. As a Trainer callback it only records the training reward the alarm
    compares against; the run's held-out monitor decides when to measure."""

    def __init__(
        self,
        cfg: GRPOConfig,
        engine: Engine,
        tasks: list[Task],
        run_dir: Path,
        model: Any = None,
        borrow: Callable[[], AbstractContextManager] = nullcontext,
    ):
        assert cfg.heldout is not None
        self.borrow = borrow  # the engine between two rollout batches (an asynchronous sampler shares it)
        self.cfg, self.heldout, self.engine, self.suite = cfg, cfg.heldout, engine, heldout_suite(cfg, tasks)
        self.model = model  # the trainer's: synced into an engine that holds its own copy (vLLM)
        self.weights = {p.name: p.weight for p in cfg.reward or []}
        self.history: list[dict[str, float]] = []
        self.rewards: list[tuple[int, float]] = []
        self.alarms: list[dict[str, Any]] = []
        self.run_dir = Path(run_dir)

    def __call__(self, step: int, record: dict) -> None:
        self.rewards.append((step, record.get("reward_mean", 0.0)))

    def measure(self, step: int, run: RunContext) -> dict[str, float]:
        """Evaluate the held-out suite now; its numbers as `heldout/tasks/<metric>`. An alarm is an
        `alarm` event of `run`."""
        result = self.evaluate(step)
        alarm = self._check_divergence(step)
        if alarm is not None:
            run.event("alarm", show=False, kind="reward_heldout_divergence", **alarm)
        return {f"heldout/{HELDOUT_SUITE}/{k}": v for k, v in result.items() if k != "step"}

    def evaluate(self, step: int) -> dict[str, float]:
        """The held-out suite now. `eval_s` is its whole time; `eval_wait_s` the part spent waiting
        for the engine (an asynchronous sampler finishing the batch it samples: sampling work, not
        evaluation, which a clock that leaves evaluations out must still count)."""
        t0 = time.perf_counter()
        with self.borrow():
            waited = time.perf_counter() - t0
            if self.model is not None:
                self.engine.sync_weights(self.model)
            result = heldout_eval(
                self.engine,
                self.suite,
                self.weights,
                seed=self.cfg.train.seed,
                out_dir=self.run_dir / "heldout" / f"step-{step:06d}",
                model_id=f"{self.run_dir.name}@step-{step}",
                by_domain=self.cfg.domains is not None,
            )
        result.update(step=step, eval_s=time.perf_counter() - t0, eval_wait_s=waited)
        self.history.append(result)
        untimed = ("step", "eval_s", "eval_wait_s")
        shown = ", ".join(f"{k} {v:.3f}" for k, v in result.items() if k not in untimed and not k.startswith("domain/"))
        console.print(f"[cyan]held-out @ step {step}: {shown}[/cyan]")
        return result

    def _check_divergence(self, step: int) -> dict[str, Any] | None:
        window = self.heldout.alarm_window
        if len(self.history) < window:
            return None
        first, last = self.history[-window], self.history[-1]
        train_then = [r for s, r in self.rewards if s <= first["step"]][-5:]
        train_now = [r for s, r in self.rewards if s <= last["step"]][-5:]
        if not train_then or not train_now:
            return None
        rise = sum(train_now) / len(train_now) - sum(train_then) / len(train_then)
        held = last["reward"] - first["reward"]
        if rise > 0.05 and held <= 0:
            alarm = {"step": step, "train_reward_rise": rise, "heldout_change": held}
            self.alarms.append(alarm)
            console.print(
                f"[bold red]alarm: training reward +{rise:.3f} while held-out changed {held:+.3f} "
                f"(steps {first['step']}..{last['step']}): reward hacking or overfitting?[/bold red]"
            )
            return alarm
        return None

    def plot(self, out: Path, train_history: list[dict]) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(1, 2, figsize=(11, 4))
        steps = [r["step"] for r in train_history]
        ax[0].plot(steps, [r.get("reward_mean", 0.0) for r in train_history], label="reward mean")
        ax[0].plot(steps, [r.get("accuracy", 0.0) for r in train_history], label="sample accuracy", alpha=0.7)
        ax[0].set(title="training rollouts", xlabel="step")
        ax[0].legend()
        hs = [h["step"] for h in self.history]
        for key in ["reward", *self.weights]:
            ax[1].plot(hs, [h.get(key, 0.0) for h in self.history], marker="o", label=f"held-out {key}")
        ax[1].set(
            title="held-out",
            xlabel="step",
            ylim=(0, max(1.05, max((h["reward"] for h in self.history), default=1) + 0.05)),
        )
        ax[1].legend()
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        return out


def grpo_inputs(cfg: GRPOConfig) -> list:
    """The recorded inputs of a GRPO stage: its task files with their roles."""
    pairs = [(cfg.tasks.source, "tasks")] + (
        [(cfg.heldout.tasks.source, "heldout")] if cfg.heldout and cfg.heldout.tasks else []
    )
    if cfg.domains:
        pairs = [(d.tasks.source, "tasks") for d in cfg.domains]
        pairs += [(d.heldout.source, "heldout") for d in cfg.domains if d.heldout is not None]
    return input_list(list(pairs))


def grpo_components(
    cfg: GRPOConfig, model: Any, tokenizer: Any, tasks: list[Task], store: Any = None, schedule: Any = None
) -> tuple[Any, Any, Any]:
    """(engine, batch source, objective) of a GRPO stage; the recipe and bench/throughput/grpo.py share it.

    `schedule`: multi-domain runs' `rollout.domains.DomainSchedule` (which domain each prompt comes from).

    With `cfg.scale`, the engine is Ray replicas and the reward workers Ray actors (Ray must
    be running: `scale.runtime.ray_session`); with `cfg.sampler`, the engine is a local process
    of its own (`scale.process_engine`); else both live in this process.

    Raises:
        UserError: `grpo.max_off_policy_steps` > 0 with an engine that samples from the trainer's model.
    """
    from tempering.models.load import resolve_model
    from tempering.models.precision import resolve_precision
    from tempering.objectives.grpo import GRPOObjective
    from tempering.rollout.select import build_engine
    from tempering.rollout.source import RolloutSource

    check_async_engine(cfg)
    precision = resolve_precision(cfg.train.precision)
    processor = tokenizer if hasattr(tokenizer, "image_processor") else None  # a VLM's (`grpo_tokenizer`)
    if processor is not None:
        tokenizer = processor.tokenizer
    engine, workers = None, None
    if cfg.scale is not None:
        from tempering.scale.engines import EngineReplicas
        from tempering.scale.reward_workers import RayRewardWorkers

        s = cfg.scale
        grace = cfg.grpo.hang_grace_s
        engine = EngineReplicas(
            cfg.model,
            cfg.lora,
            precision,
            s.engine_replicas,
            s.engine_gpus,
            deadline_s=s.engine_deadline_s,
            grace_s=grace,
        )
        workers = RayRewardWorkers(s.reward_workers, s.sandbox_slots, s.worker_cpus, s.max_retries, s.reward_deadline_s)
    elif cfg.sampler is not None:
        from tempering.scale.process_engine import ProcessEngine

        p = cfg.sampler
        grace = cfg.grpo.hang_grace_s
        engine = ProcessEngine(
            cfg.model, cfg.lora, precision, p.threads, p.call_timeout_s, p.start_timeout_s, grace, engine=cfg.engine
        )
    else:
        model_dir = resolve_model(cfg.model) if cfg.engine.kind == "vllm" else None
        engine = build_engine(cfg.engine, model, tokenizer, precision, model_dir=model_dir, processor=processor)
    if cfg.train.moe is not None and cfg.train.moe.router_replay:
        _record_routing(engine)
    source = RolloutSource(
        tasks,
        engine,
        cfg.grpo,
        cfg.train.grad_accum,
        cfg.train.seed,
        store,
        model,
        precision,
        workers,
        tokenizer,
        schedule,
    )
    return engine, source, GRPOObjective(cfg.grpo)


def check_async_engine(cfg: GRPOConfig) -> None:
    """Refuse (one line) sampling ahead of the trainer with an engine that samples from its very model."""
    if cfg.grpo.max_off_policy_steps > 0 and cfg.scale is None and cfg.sampler is None:
        raise UserError(
            f"grpo.max_off_policy_steps {cfg.grpo.max_off_policy_steps} needs an engine with its own copy of the "
            "weights: `sampler: {}` (a local engine process) or `scale:` (Ray replicas); the in-process engine "
            "samples from the very model the trainer is updating"
        )


def _record_routing(engine: Any) -> None:
    """Router replay: the engine keeps each token's experts (the in-process `hf` engine does)."""
    from tempering.rollout.engine import HFEngine

    if not isinstance(engine, HFEngine):
        raise UserError(
            f"train.moe.router_replay: the rollout records routing in the `hf` engine only, not "
            f"{type(engine).__name__}; set engine.kind: hf or router_replay: false"
        )
    engine.record_routing = True


class MismatchExceeded(UserError):
    """The trainer's and the rollout engine's log-probs of the sampled tokens drifted apart."""


MISMATCH_MEANING = {
    "logprob_mismatch": "mean |log p_train - log p_rollout|",
    "logprob_mismatch_p99": "p99 |log p_train - log p_rollout|",
    "mismatch_kl": "KL(rollout || train) on sampled tokens",
}


def mismatch_budget(budget: dict[str, float] | None, section: str = "grpo") -> Any:
    """Trainer callback: stop the run at the first step whose mismatch figure exceeds its budget.

    `budget` maps figures of `config.MISMATCH_METRICS` to bounds (None: only logged); `section`
    names the config section in the message (`grpo`, or `rl` for agent RL).
    """

    def check(step: int, record: dict) -> None:
        for name, bound in (budget or {}).items():
            value = record.get(name)
            if value is not None and value > bound:
                raise MismatchExceeded(
                    f"step {step}: {name} ({MISMATCH_MEANING[name]}) = {value:.4g} exceeds "
                    f"{section}.mismatch_budget.{name} {bound:g}; the rollout engine samples from other weights "
                    "or numerics than the trainer (check the weight sync and both precisions), or raise the budget"
                )

    return check


def grpo_guard(cfg: GRPOConfig) -> None:
    """Refused before anything is recorded: an unusable engine, or tasks of a private eval suite.

    Raises:
        ValueError: train.grad_accum above grpo.prompts_per_step (micro-batches hold whole groups).
    """
    from tempering.evals.leakage import check_private_overlap_tasks
    from tempering.rollout.select import EngineUnavailable, check_engine
    from tempering.sources.tasks import load_tasks

    check_async_engine(cfg)
    import_plugins(cfg.grpo.plugins)  # before any task loads: a plug-in may register the verifier they name
    if cfg.train.grad_accum > cfg.grpo.prompts_per_step:
        raise UserError("train.grad_accum must not exceed grpo.prompts_per_step (micro-batches hold whole groups)")
    vision = check_vision_model(cfg)
    try:
        check_engine(cfg.engine)  # a vllm engine on a host without vLLM or a GPU fails before any work
    except EngineUnavailable as exc:  # the config asks for what this host lacks: bad input, one line
        raise UserError(str(exc)) from None
    if cfg.domains:  # every domain loads (unknown source, no tasks: one line naming it) before any work
        from tempering.recipes.domains import load_domains

        for d, tasks in zip(cfg.domains, load_domains(cfg).values()):
            check_private_overlap_tasks(tasks, source=d.tasks.source)
            check_images_fit(tasks, d.tasks.source, cfg.model, vision)
        return
    tasks = load_tasks(cfg.tasks)
    check_private_overlap_tasks(tasks, source=cfg.tasks.source)
    check_images_fit(tasks, cfg.tasks.source, cfg.model, vision)
    if cfg.heldout is not None and cfg.heldout.tasks is not None:
        check_images_fit(load_tasks(cfg.heldout.tasks), cfg.heldout.tasks.source, cfg.model, vision)


def check_vision_model(cfg: GRPOConfig) -> bool:
    """Whether the model is a vision-language model; refuses (one line) what GRPO cannot do with one.

    Raises:
        ValueError: no LoRA, Ray engine replicas, vLLM, activation checkpointing or a replaced chat
            template with a VLM.
    """
    from tempering.models.vlm import is_vlm

    if not is_vlm(cfg.model):
        return False
    refusals = [
        (cfg.lora is None, "lora: null: GRPO trains a vision-language model through LoRA on its language model; set lora: {r: 16}"),
        (cfg.scale is not None, "scale: the Ray engine replicas take no image prompts yet; drop scale: for a vision-language model"),
        (cfg.sampler is not None, "sampler: the engine process takes no image prompts yet; drop sampler: for a vision-language model"),
        (cfg.engine.kind == "vllm", "engine.kind vllm takes no image prompts here yet; use kind hf"),
        (cfg.train.gradient_checkpointing, "train.gradient_checkpointing: image prompts run once per group on a cache, which checkpointing drops; set it false for a vision-language model"),
        (cfg.chat_template is not None, "chat_template: a vision-language model renders with its processor's template; drop chat_template"),
    ]  # fmt: skip
    for refused, message in refusals:
        if refused:
            raise UserError(f"model {cfg.model}: {message}")
    return True


def check_images_fit(tasks: list[Task], source: str, model: str, vision: bool) -> None:
    """Refuse image tasks for a text-only model before any work (a VLM takes text tasks too)."""
    from tempering.data.images import has_images

    if not vision and any(has_images(t.chat()) for t in tasks):
        raise UserError(
            f"tasks {source}: the prompts have images, and model {model} is text-only; start from a "
            "vision-language model (`temper vision assemble`, or a vision_sft run's output)"
        )


def grpo_tokenizer(spec: str) -> Any:
    """What renders the prompts and is saved with the model: a VLM's processor, else the tokenizer."""
    from tempering.models.load import load_tokenizer
    from tempering.models.vlm import is_vlm

    if is_vlm(spec):
        from tempering.recipes.vision import load_processor

        return load_processor(spec)
    return load_tokenizer(spec)


def grpo_model(cfg: GRPOConfig) -> Any:
    """The policy to train: a VLM with LoRA on its language model (only the adapters train), else
    `load_for_training` (LoRA or all parameters)."""
    from tempering.models.lora import load_for_training
    from tempering.models.vlm import is_vlm

    if is_vlm(cfg.model):
        from tempering.recipes.vision import vlm_for_training

        if cfg.rope_scaling is not None:
            raise UserError("rope_scaling: not supported for vision-language models yet")

        model, counts = vlm_for_training(cfg.model, cfg.lora, set())
        console.print(f"[dim]vision-language model: trainable parameters {counts}[/dim]")
        return model
    return load_for_training(cfg.model, cfg.lora, cfg.rope_scaling)


@dataclass
class GRPOTasks:
    tasks: list[Task]
    summary: dict[str, Any]
    errors: list[Any]
    domains: dict[str, list[Task]] | None = None
    """Multi-domain runs: each domain's tasks (`tasks` is their union)."""


def _prepare(cfg: GRPOConfig, tokenizer: Any) -> GRPOTasks:
    from tempering.sources.tasks import load_tasks, with_reward

    import_plugins(cfg.grpo.plugins)  # every rank: the verifiers the tasks name are registered first

    if cfg.domains:
        from tempering.config.domains import domain_plan
        from tempering.recipes.domains import load_domains

        domains = load_domains(cfg)
        union = [t for tasks in domains.values() for t in tasks]
        return GRPOTasks(union, {"domains": domain_plan(cfg.domains)}, [], domains)
    return GRPOTasks(with_reward(load_tasks(cfg.tasks), cfg.reward), {"source": cfg.tasks.source}, [])


def _components(cfg: GRPOConfig, data: GRPOTasks, tokenizer: Any, stage: Any) -> Components:
    from tempering.models.lora import check_kl_reference
    from tempering.rollout.store import TrajectoryStore

    run_dir = stage.run_dir
    schedule = None
    if data.domains is not None:
        from tempering.recipes.domains import build_schedule, domain_heldout

        by_domain, held = domain_heldout(cfg, data.domains, run_dir, split_heldout)
        tasks = [t for ts in by_domain.values() for t in ts]
        schedule = build_schedule(cfg, by_domain)
    else:
        tasks, held = heldout_tasks(cfg, data.tasks, run_dir)
    data.summary["tasks"] = len(tasks)
    model = grpo_model(cfg)
    check_kl_reference(model, cfg.grpo.beta, "grpo.beta")
    store = TrajectoryStore(run_dir, stage.name)
    engine, source, objective = grpo_components(cfg, model, tokenizer, tasks, store, schedule)
    callbacks, monitor = [mismatch_budget(cfg.grpo.mismatch_budget)], None
    if held:
        monitor = GRPOHeldout(cfg, engine, held, run_dir, model, source.orchestrator.borrowed_engine)
        callbacks.append(monitor)

    def evaluate(result: Any) -> Any:
        """The held-out numbers at the start (a fresh run) and the end, as the monitor measured them."""
        if monitor is None or not monitor.history:
            return None
        if result is None:
            return monitor.history[0] if monitor.history[0]["step"] == 0 else None
        return monitor.history[-1]

    def close() -> None:
        source.close()
        if hasattr(engine, "close"):
            engine.close()

    return Components(
        model,
        objective,
        source,
        evaluate,
        callbacks,
        close,
        outputs={"trajectories": str(store.dir)},
        summary=lambda result: _summary(data, monitor, schedule, run_dir, result),
        heldout=monitor.measure if monitor is not None else None,
        heldout_ends=True,
    )


def _summary(
    data: GRPOTasks, monitor: GRPOHeldout | None, schedule: DomainSchedule | None, run_dir: Path, result: Any
) -> dict[str, Any]:
    plot = monitor.plot(run_dir / "curves.png", result.history) if monitor else None
    domains: dict[str, Any] = {}
    if schedule is not None:
        from tempering.recipes.domains import plot_domains

        heldout = monitor.history if monitor else []
        path = plot_domains(run_dir / "domains.png", schedule.names, result.history, heldout)
        domains = {"domains": schedule.summary(), "domains_plot": str(path)}
    return {
        **domains,
        "seconds": result.seconds,
        "tasks": data.summary["tasks"],
        "heldout_history": monitor.history if monitor else [],
        "alarms": monitor.alarms if monitor else [],
        "reward_first": result.history[0].get("reward_mean") if result.history else None,
        "reward_last": result.history[-1].get("reward_mean") if result.history else None,
        "curves": str(plot) if plot else None,
    }


def _session(cfg: GRPOConfig) -> Any:
    from contextlib import nullcontext

    from tempering.scale.runtime import ray_session

    return ray_session(cfg.scale) if cfg.scale else nullcontext()


GRPO = TrainingRecipe(
    "grpo",
    base_model=lambda cfg: cfg.model,
    inputs=grpo_inputs,
    prepare=_prepare,
    components=_components,
    guard=grpo_guard,
    session=_session,
    before_key="heldout_before",
    after_key="heldout_after",
    tokenizer=grpo_tokenizer,
)
"""RL with verifiable rewards: sample, verify, update, with a held-out monitor."""


def run_grpo(cfg: GRPOConfig, force: bool = False) -> dict[str, Any]:
    """Run one GRPO stage end to end and record it (`run_training`); returns the run summary.

    `force`: resume even though the config differs from the one the run started with.
    """
    return run_training(GRPO, cfg, force)
