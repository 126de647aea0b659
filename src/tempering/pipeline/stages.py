"""The stage table of `temper run`: what each pipeline stage kind validates, reads, runs and produces.

Each training objective registered in `recipes.registry` is a kind of its own (`training_kind`,
built from the same row as its command); the others map to one existing entry point
(`run_best_of_n`, `evaluate_config`, `run_gate`,
the dedup/decontam passes); this file only builds that entry point's config from the stage's
keys and says where its outputs are. Every kind runs inside `run_stage`, so every stage is a
recorded run of `<out>/registry.sqlite` with its inputs by role.

A stage kind is a `StageKind` row:

- `config`: the pydantic model its keys validate against (the same model as the command's
  config file, so a stage reads like that file without `out` / `name`);
- `inputs`: dotted keys holding files or dirs the stage reads (checked before any work, and
  hashed into the stage's identity; `*` walks a list);
- `outputs`: what later stages may refer to as `${stage.output}`;
- `owned`: keys the runner sets (the run root and name, an output path); a pipeline may not;
- `seed_key`: where the pipeline's `seed` goes when the stage sets none;
- `resumable`: its run dir holds trainer checkpoints, so a killed stage resumes instead of
  restarting;
- `steps_key`: the step target, for the progress display;
- `recipe`: a training objective's recipe module, whose code (with all it imports) is the stage's
  code in its cache key (`code_entries`, `pipeline/fingerprint.py`); the other kinds' code
  starts at their `run` function here.

The `gate` kind records its verdict as an eval of the candidate in the registry, and the
`release` kind promotes a checkpoint through `evals.verdict.promote_judged` only when its
verdict passed and judged that checkpoint's weights on its suites as they are now (the runner
already stops at a rejected gate; the release refuses one too, and any other mismatch), so
`temper lineage CHECKPOINT` shows the verdict and the release, or "not released".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tempering.atomic import write_text_atomic
from tempering.config import (
    BestOfNStageConfig,
    DecontamStageConfig,
    DedupStageConfig,
    EvalConfig,
    ExportStageConfig,
    FeedbackConfig,
    GateStageConfig,
    LongctxDataConfig,
    MergeConfig,
    MixConfig,
    PairsConfig,
    ReleaseStageConfig,
    StratifyConfig,
    Strict,
    SynthConfig,
)
from tempering.errors import UserError
from tempering.recipes.registry import Registration, load_plugins
from tempering.runs.registry import Registry, describe_input
from tempering.runs.stage import StageSpec, input_list, run_stage

RESULTS_FILE = "results.json"
VERDICT_FILE = "gate.json"


@dataclass
class StageContext:
    """What the runner hands a stage: where it runs, and where its progress lines go."""

    root: Path  # the pipeline's run root (registry.sqlite lives here)
    name: str  # the run name, <stage>-<hash12>; the run dir is root / name
    console: Any  # rich console for recipes that print progress
    log: Callable[[str], None]  # one short progress line (shown in the display)

    @property
    def run_dir(self) -> Path:
        return self.root / self.name


# (outputs {name: path}, summary) of one finished stage
StageOutput = tuple[dict[str, str], dict[str, Any]]


@dataclass(frozen=True)
class StageKind:
    """One row of the stage table (see the module docstring)."""

    config: type[Strict]
    run: Callable[[Any, StageContext], StageOutput]
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    owned: tuple[str, ...] = ("out", "name")
    seed_key: str | None = None
    resumable: bool = False
    steps_key: str | None = None
    recipe: str | None = None

    def code_entries(self) -> list[tuple[str, str | None]]:
        """Where the stage's code starts, as `pipeline.fingerprint.stage_code` entries."""
        if self.recipe is not None:
            return [(self.recipe, None), (__name__, training_kind.__name__)]
        return [(self.run.__module__, self.run.__name__)]

    def build(self, keys: dict[str, Any], ctx_root: Path, run_name: str) -> Any:
        """The validated config of a stage: its keys plus the runner-owned ones."""
        return self.config.model_validate({**keys, **owned_values(self, ctx_root, run_name)})


def owned_values(kind: StageKind, root: Path, run_name: str) -> dict[str, Any]:
    """The values of a kind's runner-owned keys for one run."""
    run_dir = root / run_name
    values = {"out": str(root), "name": run_name}
    if kind.config is EvalConfig:
        values["out"] = str(run_dir)
    if kind.config is PairsConfig:
        values["output"] = str(run_dir / "pairs.jsonl")
    return {k: v for k, v in values.items() if k in kind.owned}


# ------------------------------------------------------------------ training recipes
_TRAIN: dict[str, Any] = dict(owned=("out", "name"), seed_key="train.seed", resumable=True, steps_key="train.steps")


def _final(summary: dict[str, Any]) -> StageOutput:
    return {"final": summary["final"]}, summary


def training_kind(entry: Registration) -> StageKind:
    """The stage kind of a registered training objective: its recipe's run, resumable, seeded."""

    def run(cfg: Any, ctx: StageContext) -> StageOutput:
        summary = entry.runner()(cfg)
        return {k: summary[k] for k in entry.outputs}, summary

    recipe = entry.run.partition(":")[0] if isinstance(entry.run, str) else entry.run.__module__
    return StageKind(
        entry.config_class(), run, entry.outputs, inputs=entry.inputs, models=entry.models, recipe=recipe, **_TRAIN
    )


def _best_of_n(cfg: BestOfNStageConfig, ctx: StageContext) -> StageOutput:
    """Best-of-n as a recorded run: the reward model and the policy are its inputs."""
    from tempering.config import BestOfNSettings
    from tempering.recipes.best_of_n import run_best_of_n

    settings = BestOfNSettings(**cfg.model_dump(exclude={"reward_model", "precision"}))
    inputs = [describe_input(cfg.reward_model, "reward_model")]
    spec = StageSpec("best-of-n", str(ctx.root), ctx.name, cfg.model_dump(), inputs, cfg.policy, 1, cfg.seed)
    records = ctx.run_dir / "best_of_n.jsonl"
    with run_stage(spec) as stage:
        if not stage.finished:
            summary = run_best_of_n(settings, cfg.reward_model, cfg.precision, records)
            stage.finish({"steps": 1, **summary}, {"records": str(records)})
    return {"records": str(records)}, stage.summary


# ------------------------------------------------------------------ data recipes
def _synth(cfg: SynthConfig, ctx: StageContext) -> StageOutput:
    from tempering.recipes.synth import run_synth

    s = run_synth(cfg, console=ctx.console)
    return {k: s[f"{k}_file"] for k in ("sft", "failures", "pairs") if f"{k}_file" in s}, s


def _stratify(cfg: StratifyConfig, ctx: StageContext) -> StageOutput:
    from tempering.recipes.stratify import run_stratify

    s = run_stratify(cfg, console=ctx.console)
    return {"tasks": s["rl_set_file"], "stratified": s["stratified_file"]}, s


def _mix(cfg: MixConfig, ctx: StageContext) -> StageOutput:
    from tempering.recipes.mix import check_config, run_mix

    check_config(cfg)
    s = run_mix(cfg)
    return {"data": s["output"]}, s


def _pairs(cfg: PairsConfig, ctx: StageContext) -> StageOutput:
    from tempering.recipes.pairs import run_pairs

    s = run_pairs(cfg, console=ctx.console)
    return {"pairs": s["output"]}, s


def _feedback(cfg: FeedbackConfig, ctx: StageContext) -> StageOutput:
    from tempering.recipes.feedback import OUTPUT_FILES, run_feedback

    s = run_feedback(cfg)
    return {key: str(ctx.run_dir / name) for key, name in OUTPUT_FILES.items()}, s


def _data_pass(kind: str, cfg: Any, ctx: StageContext, body: Callable[[Path], Any]) -> StageOutput:
    """A dedup / decontam pass as a recorded run: input `data` (role train), outputs `data` and `report`."""
    settings = cfg.model_dump(exclude={"data", "against"})
    spec = StageSpec(kind, str(ctx.root), ctx.name, cfg.model_dump(), input_list([(cfg.data, "train")]), None, 1)
    out = ctx.run_dir / "data.jsonl"
    with run_stage(spec) as stage:
        if not stage.finished:
            result = body(out)
            stage.record_output("data", out)
            stage.finish(
                {"steps": 1, **result.counts, "settings": settings, "sha256": result.sha256},
                {"data": str(out), "report": str(result.report)},
            )
    return {"data": str(out), "report": str(out.with_suffix(f".{kind}.json"))}, stage.summary


def _dedup(cfg: DedupStageConfig, ctx: StageContext) -> StageOutput:
    from tempering.config import DedupSettings
    from tempering.recipes.datatools import dedup_file

    settings = DedupSettings(**cfg.model_dump(exclude={"data"}))
    return _data_pass("dedup", cfg, ctx, lambda out: dedup_file(Path(cfg.data), out, settings))


def _decontam(cfg: DecontamStageConfig, ctx: StageContext) -> StageOutput:
    from tempering.config import DecontamSettings
    from tempering.recipes.datatools import decontam_file

    settings = DecontamSettings(**cfg.model_dump(exclude={"data", "against"}))
    return _data_pass("decontam", cfg, ctx, lambda out: decontam_file(Path(cfg.data), cfg.against, out, settings))


def _longctx(cfg: LongctxDataConfig, ctx: StageContext) -> StageOutput:
    """Long-context SFT rows (`temper data longctx` as a stage): output `data`."""
    from tempering.atomic import write_jsonl_atomic
    from tempering.config import LongctxSettings
    from tempering.sources.longctx import longctx_sft_rows

    settings = LongctxSettings(**cfg.model_dump(include=set(LongctxSettings.model_fields)))
    spec = StageSpec("data.longctx", str(ctx.root), ctx.name, cfg.model_dump(), [], cfg.model, 1, cfg.seed)
    out = ctx.run_dir / "data.jsonl"
    with run_stage(spec) as stage:
        if not stage.finished:
            ctx.log(f"{len(cfg.kinds)} kinds x {len(cfg.lengths)} lengths x {cfg.n} haystacks")
            rows = longctx_sft_rows(list(cfg.kinds), cfg.n, cfg.seed, cfg.split, settings)
            count, sha = write_jsonl_atomic(out, rows, sidecar=True)
            stage.record_output("data", out)
            stage.finish({"steps": 1, "rows": count, "sha256": sha, "settings": cfg.model_dump()}, {"data": str(out)})
    return {"data": str(out)}, stage.summary


# ------------------------------------------------------------------ evals and the gate
def _eval(cfg: EvalConfig, ctx: StageContext) -> StageOutput:
    from tempering.evals.evaluate import evaluate_config

    files = [(s, "eval") for s in cfg.suites if Path(s).suffix in (".yaml", ".yml")]
    spec = StageSpec(
        "eval", str(ctx.root), ctx.name, cfg.model_dump(), input_list(files), cfg.model, 1, cfg.first_seed, cfg.threads
    )
    results_path = ctx.run_dir / RESULTS_FILE
    with run_stage(spec) as stage:
        if not stage.finished:
            # the stage's config is the command's: every key (quantize too) means what `temper eval run` does
            results = evaluate_config(cfg.model_copy(update={"out": str(stage.run_dir)}), warn=ctx.log, log=ctx.log)
            metrics = {s.suite: {k: m.mean for k, m in s.metrics.items()} for s in results.suites}
            stage.finish(
                {"steps": 1, "model": cfg.model, "suites": metrics},
                {"results": str(results_path), "report": str(stage.run_dir / "report.html")},
            )
    return {"results": str(results_path), "report": str(ctx.run_dir / "report.html")}, stage.summary


def gate_rules(cfg: GateStageConfig, where: str) -> list[Any]:
    """The gate's parsed rules (inline or from its file).

    Raises:
        GateRuleError: a rule that does not parse, or neither / both of rules and rules_file.
    """
    from tempering.evals.gate import GateRuleError, load_rules, parse_rules

    if cfg.rules is not None and cfg.rules_file is not None:
        raise GateRuleError(f"{where}: give exactly one of 'rules' (a list) and 'rules_file' (a YAML path)")
    if cfg.rules is not None:
        return parse_rules(cfg.rules, source=f"{where}: rules")
    if cfg.rules_file is None:
        raise GateRuleError(f"{where}: give exactly one of 'rules' (a list) and 'rules_file' (a YAML path)")
    return load_rules(cfg.rules_file)


def _gate(cfg: GateStageConfig, ctx: StageContext) -> StageOutput:
    from tempering.evals.gate import run_gate
    from tempering.evals.results import EvalResults

    rules = gate_rules(cfg, ctx.name)
    base, cand = EvalResults.load(cfg.base), EvalResults.load(cfg.candidate)
    # the candidate model is the gate's base_model input: lineage of the checkpoint reaches its verdict
    inputs = [describe_input(cfg.base, "eval"), describe_input(cfg.candidate, "eval")]
    spec = StageSpec("gate", str(ctx.root), ctx.name, cfg.model_dump(), inputs, cand.model, 1, cfg.seed)
    verdict_path = ctx.run_dir / VERDICT_FILE
    with run_stage(spec) as stage:
        if not stage.finished:
            verdict = run_gate(rules, base, cand, seed=cfg.seed)
            write_text_atomic(verdict_path, json.dumps(verdict.to_dict(), indent=1))
            failed = [c.rule for c in verdict.rules if not c.passed]
            with Registry.open(ctx.root) as registry:  # the verdict is an eval of the candidate: lineage shows it
                registry.record_eval(
                    cand.model,
                    cfg.candidate,
                    gate=verdict.to_dict(),
                    metrics={s.suite: {k: m.mean for k, m in s.metrics.items()} for s in cand.suites},
                )
            stage.finish(
                {
                    "steps": 1,
                    "passed": verdict.passed,
                    "verdict": "passed" if verdict.passed else "rejected",
                    "failed_rules": failed,
                    "base": base.model,
                    "candidate": cand.model,
                    "rules": [c.to_dict() for c in verdict.rules],
                },
                {"verdict": str(verdict_path)},
            )
    return {"verdict": str(verdict_path)}, stage.summary


def _merge(cfg: MergeConfig, ctx: StageContext) -> StageOutput:
    from tempering.recipes.merge import run_merge

    return _final(run_merge(cfg))


def _release(cfg: ReleaseStageConfig, ctx: StageContext) -> StageOutput:
    from tempering.evals.verdict import promote_judged

    verdict = json.loads(Path(cfg.gate).read_text())
    inputs = [describe_input(cfg.gate, "eval")]
    spec = StageSpec("release", str(ctx.root), ctx.name, cfg.model_dump(), inputs, cfg.model, 1, 0)
    release_path = ctx.run_dir / "release.json"
    with run_stage(spec) as stage:
        if not stage.finished:
            with Registry.open(ctx.root) as registry:
                release = promote_judged(
                    registry, cfg.model, verdict, alias=cfg.alias, reason=f"pipeline stage {ctx.name}"
                )
            record = {
                "version": release.version,
                "alias": cfg.alias,
                "model": release.model,
                "model_sha256": release.model_sha256,
            }
            write_text_atomic(release_path, json.dumps(record, indent=1))
            stage.finish({"steps": 1, **record}, {"release": str(release_path)})
    return {"release": str(release_path)}, stage.summary


def _export(cfg: ExportStageConfig, ctx: StageContext) -> StageOutput:
    from tempering.models.load import adapter_base, resolve_model
    from tempering.models.lora import export_merged

    if adapter_base(resolve_model(cfg.model)) is None:
        raise UserError(f"{cfg.model} is not a PEFT adapter directory (no adapter_config.json): nothing to merge")
    spec = StageSpec(
        "export", str(ctx.root), ctx.name, cfg.model_dump(), [describe_input(cfg.model, "base_model")], cfg.model, 1, 0
    )
    model_dir = ctx.run_dir / "model"
    with run_stage(spec) as stage:
        if not stage.finished:
            export_merged(cfg.model, str(model_dir), cfg.dtype)
            stage.record_output("merged", model_dir)
            stage.finish({"steps": 1, "dtype": cfg.dtype, "final": str(model_dir)}, {"final": str(model_dir)})
    return {"final": str(model_dir)}, stage.summary


KINDS: dict[str, StageKind] = {
    "eval": StageKind(
        EvalConfig,
        _eval,
        ("results", "report"),
        inputs=("suites",),
        models=("model",),
        owned=("out",),
        seed_key="first_seed",
    ),
    "data.dedup": StageKind(DedupStageConfig, _dedup, ("data", "report"), inputs=("data",), owned=()),
    "data.decontam": StageKind(
        DecontamStageConfig, _decontam, ("data", "report"), inputs=("data", "against"), owned=()
    ),
    "data.mix": StageKind(
        MixConfig,
        _mix,
        ("data",),
        inputs=("sources.*.data", "replay.data"),
        models=("tokenizer",),
        owned=("out", "name", "output"),
        seed_key="seed",
    ),
    "data.longctx": StageKind(LongctxDataConfig, _longctx, ("data",), models=("model",), owned=(), seed_key="seed"),
    "data.stratify": StageKind(
        StratifyConfig, _stratify, ("tasks", "stratified"), inputs=("tasks.source",), models=("model",), seed_key="seed"
    ),
    "data.synth": StageKind(
        SynthConfig, _synth, ("sft", "failures", "pairs"), inputs=("tasks.source",), models=("model",), seed_key="seed"
    ),
    "data.pairs": StageKind(
        PairsConfig,
        _pairs,
        ("pairs",),
        inputs=("tasks.source",),
        models=("model",),
        owned=("out", "name", "output"),
        seed_key="seed",
    ),
    "feedback": StageKind(
        FeedbackConfig,
        _feedback,
        ("tasks", "pairs", "report"),
        inputs=("evals", "served", "votes", "pool.source"),
        seed_key="seed",
    ),
    "best-of-n": StageKind(
        BestOfNStageConfig,
        _best_of_n,
        ("records",),
        inputs=("tasks.source",),
        models=("reward_model", "policy"),
        owned=(),
        seed_key="seed",
    ),
    "merge": StageKind(MergeConfig, _merge, ("final",), models=("inputs.*", "base"), seed_key="seed"),
    "gate": StageKind(
        GateStageConfig, _gate, ("verdict",), inputs=("base", "candidate", "rules_file"), owned=(), seed_key="seed"
    ),
    "export": StageKind(ExportStageConfig, _export, ("final",), models=("model",), owned=()),
    "release": StageKind(ReleaseStageConfig, _release, ("release",), inputs=("gate",), models=("model",), owned=()),
}
"""The stage kinds that are not training objectives; `stage_kinds()` adds one per registered objective."""


def stage_kinds() -> dict[str, StageKind]:
    """Every stage kind: one per registered training objective (plug-ins included), then the table."""
    return {**{name: training_kind(e) for name, e in load_plugins().items()}, **KINDS}
