"""Evaluate a model on suites and write what `temper eval run` writes; library code, no exits.

    results = evaluate_config(EvalConfig(suites=["arithmetic"], model="runs/x/final", out="out/"))

`evaluate_config` is the one entry of `temper eval run` and of the pipeline's eval stage: every
EvalConfig key reaches `evaluate_model` here, and agent suites (`agent:<suite>`) are dispatched
here too, so the two cannot drift (a stage with `quantize: int8` evaluates the int8 copy, as the
command does; a pipeline gates on an agent suite as on any other).

Writes `<out>/results.json` (`EvalResults`), `<out>/samples.jsonl` (every generation with
its judgement, `evals.runner.sample_record`; private suites: hashed ids, no text), each prompt
picture once as `<out>/images/<digest>.png`, and `<out>/report.html`; the config's `loggers`
receive each suite's metrics (`track_results`). The GRPO held-out monitor writes the same files
per evaluation through `write_eval_outputs`, so `temper eval show` / `compare` read both alike.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Sequence

from tempering.atomic import write_jsonl_atomic
from tempering.config import EngineSettings, EvalConfig, RopeScaling, ScaleSettings
from tempering.errors import UserError
from tempering.evals.results import EvalResults, SuiteResult
from tempering.evals.suite import Suite, SuiteError, load_suite

SAMPLES_FILE = "samples.jsonl"


class EvalError(UserError):
    """An evaluation that cannot run (e.g. the model cannot be loaded); the message says why."""


def write_eval_outputs(
    out_dir: str | Path, results: EvalResults, records: Sequence[dict[str, Any]], report: bool = True
) -> Path:
    """results.json, samples.jsonl (and report.html) under `out_dir`; returns the results path.

    Prompt pictures are saved once each under `out_dir/images/` and the samples point there
    (`evals/sample_images.py`); the report shows them beside its sample rows.
    """
    from tempering.evals.sample_images import store_sample_images

    out_dir = Path(out_dir)
    path = results.save(out_dir / "results.json")
    records = store_sample_images(records, out_dir)
    write_jsonl_atomic(out_dir / SAMPLES_FILE, records, sidecar=False)
    if report:
        from tempering.evals.report import render_report

        render_report(results, out_dir, samples=records)
    return path


def load_suites(cfg: EvalConfig) -> list[Suite]:
    """The config's suites with its seeds / samples / limit applied.

    Raises:
        SuiteError: a suite that does not load, or one listed twice.
    """
    loaded = [load_suite(s).with_overrides(seeds=cfg.seeds, samples=cfg.samples, limit=cfg.limit) for s in cfg.suites]
    names = [s.name for s in loaded]
    if len(set(names)) != len(names):
        raise SuiteError(f"a suite is listed twice: {names}")
    return loaded


def evaluate_config(
    cfg: EvalConfig,
    *,
    warn: Callable[[str], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> EvalResults:
    """Run an EvalConfig: its suites on its model, outputs under `cfg.out` (see `evaluate_model`),
    the eval recorded in the model's registry (`evals/record.py`). Agent suites (`agent:<suite>`)
    run through `evals/agent_suites.py` and join the same results.json, samples.jsonl and report.

    Raises:
        EvalError, SuiteError: as `evaluate_model` and `load_suites`; EvalError also for a
            tracker in `cfg.loggers` that cannot run here.
        UserError: an agent suite that does not load.
    """
    from tempering.evals.agent_suites import is_agent_suite
    from tempering.tracking.trackers import TrackerUnavailable, require_trackers

    try:  # before the model loads: a tracker that cannot run stops the eval here
        require_trackers(cfg.loggers)
    except TrackerUnavailable as exc:
        raise EvalError(f"loggers: {exc}") from None
    plain = cfg.model_copy(update={"suites": [s for s in cfg.suites if not is_agent_suite(s)]})
    suites = load_suites(plain)  # every suite is checked before any episode runs
    agent_suites, agent_records = _run_agent_suites(cfg, [s for s in cfg.suites if is_agent_suite(s)], log)
    if suites:
        results = _evaluate_suites(plain, suites, warn, log, agent_suites, agent_records)
    else:  # agent suites alone: their runner loaded the model
        results = EvalResults(model=cfg.model, suites=agent_suites)
        write_eval_outputs(cfg.out, results, agent_records)
    if cfg.loggers:
        track_results(cfg, results)
    from tempering.evals.record import record_eval_results

    record_eval_results(results, cfg.out, log or (lambda _: None))  # so `temper lineage` shows it
    return results


def _run_agent_suites(
    cfg: EvalConfig, names: list[str], log: Callable[[str], None] | None
) -> tuple[list[SuiteResult], list[dict[str, Any]]]:
    """The agent suites' `SuiteResult`s and samples rows (nothing for no names); a line per suite and tier."""
    if not names:
        return [], []
    from tempering.evals.agent_suites import run_agent_suites, summary_lines

    log = log or (lambda _: None)
    results = run_agent_suites(
        cfg.model,
        names,
        Path(cfg.out),
        seeds=cfg.seeds or 1,
        first_seed=cfg.first_seed,
        limit=cfg.limit,
        precision=cfg.precision,
        engine_settings=cfg.engine if "engine" in cfg.model_fields_set else None,
        cache=cfg.cache,
        log=log,
    )
    for line in summary_lines(results):
        log(line)
    log(f"agent results: {Path(cfg.out) / 'agent_results.json'}")
    return results["suite_results"], results["records"]


def _evaluate_suites(
    cfg: EvalConfig,
    suites: list[Suite],
    warn: Callable[[str], None] | None,
    log: Callable[[str], None] | None,
    extra_suites: Sequence[SuiteResult],
    extra_records: Sequence[dict[str, Any]],
) -> EvalResults:
    """`evaluate_model` with every key of the config."""
    return evaluate_model(
        cfg.model,
        suites,
        cfg.out,
        first_seed=cfg.first_seed,
        cache=cfg.cache,
        threads=cfg.threads,
        precision=cfg.precision,
        engine_settings=cfg.engine,
        scale=cfg.scale,
        quantize=cfg.quantize,
        rope_scaling=cfg.rope_scaling,
        warn=warn,
        log=log,
        extra_suites=extra_suites,
        extra_records=extra_records,
    )


def track_results(cfg: EvalConfig, results: EvalResults) -> None:
    """Each suite's metrics (mean and interval, as `<suite>/<metric>[/low|/high]`) to the trackers
    `cfg.loggers` names, with the config as parameters and the model and suite hashes as tags."""
    from tempering.tracking.trackers import open_trackers

    lineage = {"kind": "eval", "model": results.model, "out": str(Path(cfg.out).resolve())}
    scalars: dict[str, float] = {}
    for s in results.suites:
        lineage[f"suite.{s.suite}.hash"] = s.suite_hash
        if s.model_hash:
            lineage["model_hash"] = s.model_hash
        for name, m in s.metrics.items():
            for key, value in ((name, m.mean), (f"{name}/low", m.low), (f"{name}/high", m.high)):
                if value is not None:
                    scalars[f"{s.suite}/{key}"] = float(value)
    for tracker in open_trackers(cfg.loggers, Path(cfg.out), cfg.model_dump(mode="json"), lineage):
        tracker.log_metrics(scalars, 0)
        tracker.close()


def evaluate_model(
    model: str,
    suites: list[Suite],
    out_dir: str | Path,
    *,
    first_seed: int = 0,
    cache: bool = True,
    threads: int | str | None = "auto",
    precision: str = "auto",
    engine_settings: EngineSettings | None = None,
    scale: ScaleSettings | None = None,
    warn: Callable[[str], None] | None = None,
    log: Callable[[str], None] | None = None,
    quantize: str = "none",
    rope_scaling: RopeScaling | None = None,
    extra_suites: Sequence[SuiteResult] = (),
    extra_records: Sequence[dict[str, Any]] = (),
) -> EvalResults:
    """Load `model`, scan its training lineage for contamination, run every suite, write the outputs.

    Args:
        quantize: "int8" evaluates the weight-only int8 copy of the model (its own cache key).
        rope_scaling: stretch the model's RoPE at load (its own cache key).
        extra_suites, extra_records: results and sample rows evaluated elsewhere (agent
            suites) that go into the same results.json, samples.jsonl and report.
        scale: sample on Ray engine replicas and score on Ray reward actors (a local Ray is
            started for the call unless `scale.address` names one).
        warn: receives warnings (a training input gone or changed since training).
        log: receives progress lines.
    Raises:
        EvalError: the model cannot be found or loaded, or the configured engine cannot run here.
        SuiteError: a suite cannot be run (no computable metric, no task could be scored).
    """

    from tempering.evals.cache import default_cache_dir, model_dir_hash
    from tempering.evals.leakage import contaminated_rows, training_lineage
    from tempering.evals.runner import run_suite_samples
    from tempering.models.load import ModelNotFound, load_model, load_tokenizer, resolve_model
    from tempering.models.precision import default_device, resolve_precision
    from tempering.models.rope import RopeScalingError
    from tempering.models.threads import set_threads
    from tempering.models.vlm import is_vlm
    from tempering.rollout.select import EngineUnavailable, build_engine, check_engine, load_engine

    warn, log = warn or (lambda _: None), log or (lambda _: None)
    for suite in suites:  # every task row and verifier spec is checked before any model loads
        suite.task_list  # noqa: B018
    lineage = training_lineage(model)
    for recorded in lineage.missing:
        warn(f"training input {recorded} is gone; it could not be scanned")
    for recorded in lineage.changed:
        warn(f"training input {recorded} changed since training; scanned as it is now")
    scan = contaminated_rows(lineage.files, suites)
    rows = scan.rows
    if scan.quarantined:
        warn(
            f"{len(scan.quarantined)} unreadable training row(s) skipped by the contamination scan, "
            f"as training skips them; first: {scan.quarantined[0]}"
        )
    if lineage.runs:
        found = sum(len(r) for r in rows.values())
        log(
            f"lineage: {' <- '.join(lineage.runs)}; {len(lineage.files)} training file(s) scanned, "
            f"{found} contaminated row(s), {len(scan.quarantined)} unreadable row(s) skipped"
        )
    settings = engine_settings or EngineSettings()
    if quantize != "none" and (scale is not None or settings.kind == "vllm"):
        raise EvalError("quantize: int8 runs on the in-process engines (not vLLM or Ray `scale:`)")
    with ExitStack() as stack:
        pool = None
        try:
            if scale is not None:
                engine, pool = _ray_engine_and_workers(stack, model, resolve_precision(precision), scale)
            elif is_vlm(model):  # images: the hf engine with the model's processor (rollout/select.py)
                if rope_scaling is not None:
                    raise EvalError("rope_scaling: not supported for vision-language models yet")
                engine = load_engine(settings, model, precision, quantize)
            else:
                check_engine(settings)
                model_dir = resolve_model(model) if settings.kind == "vllm" else None
                loaded = load_model(model, rope_scaling=rope_scaling)
                if quantize == "int8":
                    from tempering.models.quantize import quantize_int8

                    loaded = quantize_int8(loaded.merge_and_unload() if hasattr(loaded, "merge_and_unload") else loaded)
                if model_dir is None:  # in-process engines sample on the GPU where there is one
                    loaded = loaded.to(default_device())
                engine = build_engine(
                    settings, loaded, load_tokenizer(model), resolve_precision(precision), model_dir=model_dir
                )
        except (ModelNotFound, EngineUnavailable, RopeScalingError) as exc:
            raise EvalError(str(exc)) from None
        set_threads(threads, log)  # after the model loaded: a bad model spec stays a one-line error
        try:
            model_hash = (
                model_dir_hash(model) + ("" if quantize == "none" else f"+{quantize}") + _rope_tag(rope_scaling)
            )
        except ModelNotFound:  # a hub id: the runner hashes the loaded weights instead
            model_hash = None
        out_suites, records = [], []
        for suite in suites:
            result, samples = run_suite_samples(
                suite,
                engine,
                first_seed=first_seed,
                model_id=model,
                model_hash=model_hash,
                reward_workers=pool,
                cache_dir=default_cache_dir() if cache else None,
                log=log,
            )
            out_suites.append(
                result.model_copy(
                    update={"contaminated_rows": rows[suite.name], "contamination_hits": len(rows[suite.name])}
                )
            )
            records += samples
    results = EvalResults(model=model, suites=out_suites + list(extra_suites))
    write_eval_outputs(out_dir, results, records + list(extra_records))
    return results


def _rope_tag(scaling: RopeScaling | None) -> str:
    """The cache key's mark of a scaling applied at load: the directory hash alone cannot tell."""
    return "" if scaling is None else "+rope" + json.dumps(scaling.model_dump(exclude_none=True), sort_keys=True)


def _ray_engine_and_workers(stack: ExitStack, model: str, precision: str, scale: ScaleSettings) -> tuple[Any, Any]:
    """Engine replicas and reward actors on Ray, closed (and a local Ray stopped) with `stack`."""
    from tempering.scale.engines import EngineReplicas
    from tempering.scale.reward_workers import RayRewardWorkers
    from tempering.scale.runtime import ray_session

    stack.enter_context(ray_session(scale))
    engine = EngineReplicas(
        model, None, precision, scale.engine_replicas, scale.engine_gpus, deadline_s=scale.engine_deadline_s
    )
    stack.callback(engine.close)
    s = scale
    pool = stack.enter_context(
        RayRewardWorkers(s.reward_workers, s.sandbox_slots, s.worker_cpus, s.max_retries, s.reward_deadline_s)
    )
    return engine, pool
