"""`temper run PIPELINE.yaml`: stages in order, each cached by one content hash, resumable after kill -9.

    plan = load_plan("examples/pipeline.yaml")      # every check before any work (loop_plan)
    result = run_pipeline(plan)                      # runs, skips cached stages, stops at a rejected gate

Identity. A stage's hash is sha256 over: its kind, its validated config (runner-owned keys
left out) with every input path replaced by the sha256 of the bytes there (files; dirs as
their sorted files, the run marker left out; an agent suite by its tasks), the code it runs
(`pipeline/fingerprint.py: stage_code`: each module its recipe or stage function imports,
transitively, by its code without docstrings and comments, the package data beside them, and
the versions of the libraries they import) and its seed. Paths do not count, bytes do: moving
the project keeps the cache, an upstream stage that reproduces its output bit for bit keeps the
downstream cache, and an edit to code the stage does not run (or to a docstring) keeps it too.

Cache. A stage runs in `<out>/<stage>-<hash12>/`, which holds `pipeline-stage.json` (hash,
status, outputs with their digests). A stage is cached when that record says done (or
rejected, for a gate) and every output still has its recorded digest; a changed hash is a new
dir (the old one stays, so switching back is a cache hit). A record that says running is an
interrupted stage (kill -9): a training stage resumes from its newest verified checkpoint
(run_stage's resume rules), any other kind restarts in a clean dir.

Gate. A `gate` stage whose verdict fails stops the pipeline: status `rejected`, no later
stage runs. Every stage is a run of `<out>/registry.sqlite` (through `run_stage`), and the
pipeline itself is one more run (kind `pipeline`) whose metrics hold each stage's status and
the verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tempering.atomic import write_text_atomic
from tempering.errors import is_user_error, one_line, write_crash_log
from tempering.evals.agent_suites import agent_suite_digest, is_agent_suite
from tempering.hashing import sha256_file
from tempering.pipeline.fingerprint import stage_code
from tempering.pipeline.plan import (
    PipelineError,
    Plan,
    PlannedStage,
    _substitute,
    is_file_value,
    is_model_path,
    load_plan,
    walk,
)
from tempering.pipeline.stages import StageContext
from tempering.pipeline.tracks import attempt_stages, rebalance_step
from tempering.runs.registry import MARKER, REGISTRY_ENV, Registry, describe_input, model_dir
from tempering.runs.stage import REGISTRY_FILE, run_lock

__all__ = ["load_plan", "run_pipeline", "dry_run", "PipelineError", "StageOutcome", "PipelineResult"]
RECORD = "pipeline-stage.json"
_SKIP_IN_DIGEST = {MARKER, RECORD, ".lock"}
Events = Callable[[str, str, dict[str, Any]], None]


@dataclass
class StageOutcome:
    """What happened to one stage in this run."""

    name: str
    kind: str
    status: str  # cached | done | failed | rejected | skipped
    hash: str | None = None
    run_dir: Path | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    crash_log: Path | None = None  # a stage that failed on a bug (not bad input): its traceback


@dataclass
class PipelineResult:
    """The pipeline's status (passed | rejected | failed) and each stage's outcome."""

    status: str
    stages: list[StageOutcome]
    run_id: str | None = None
    attempts: list[dict[str, Any]] = field(default_factory=list)  # with tracks: each attempt (pipeline/tracks.py)


# ------------------------------------------------------------------ identity
_FILE_DIGESTS: dict[tuple[str, int, int], str] = {}


def content_digest(path: str | Path) -> str:
    """sha256 of a file's bytes, or of a dir's sorted (relative name, bytes) leaving out run bookkeeping
    (the run marker, this record, the lock): the bytes a later stage reads."""
    path = Path(path)
    if path.is_file():
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key not in _FILE_DIGESTS:
            _FILE_DIGESTS[key] = sha256_file(path)
        return _FILE_DIGESTS[key]
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name not in _SKIP_IN_DIGEST):
        h.update(f.relative_to(path).as_posix().encode() + b"\0" + content_digest(f).encode() + b"\n")
    return h.hexdigest()


def input_identity(value: str, key: str) -> str:
    """What an input value counts as in a stage's hash: a file's or dir's bytes, an agent suite's
    tasks as loaded (`agent:<suite>`, task files and fixtures), or else its name."""
    if key.split(".")[0] == "suites" and is_agent_suite(value):
        return f"{value}@sha256:{agent_suite_digest(value)}"
    return f"sha256:{content_digest(value)}" if is_file_value(value, key) else value


def _plugins(cfg: Any) -> list[str]:
    """The plug-in modules a stage's config names (`grpo.plugins`, `dpo.plugins`, ...): their code
    is the stage's code too."""
    if isinstance(cfg, dict):
        named = cfg.get("plugins")
        found = [m for m in named if isinstance(m, str)] if isinstance(named, list) else []
        return found + [m for k, v in cfg.items() if k != "plugins" for m in _plugins(v)]
    return [m for v in cfg for m in _plugins(v)] if isinstance(cfg, list) else []


def stage_identity(plan: Plan, stage: PlannedStage, keys: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(hash, the document hashed) of a stage whose references are resolved to paths."""
    spec = stage.spec
    cfg = spec.build(keys, plan.root, f"{stage.name}-0").model_dump(mode="json", exclude=set(spec.owned))
    for dotted in spec.inputs:
        walk(cfg, dotted, input_identity)
    for dotted in spec.models:
        walk(cfg, dotted, lambda v, k: f"sha256:{content_digest(model_dir(v))}" if is_model_path(v) else v)
    seed: Any = cfg
    for part in (spec.seed_key or "").split("."):
        seed = seed.get(part) if isinstance(seed, dict) and part else None
    entries = spec.code_entries() + [(m, None) for m in sorted(set(_plugins(cfg)))]
    doc = {"kind": stage.kind, "config": cfg, "code": stage_code(entries), "seed": seed}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest(), doc


# ------------------------------------------------------------------ the stage record
def read_record(run_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads((run_dir / RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    """Atomically (write, fsync, rename): a kill -9 leaves the old record or the new one, never half."""
    write_text_atomic(run_dir / RECORD, json.dumps(record, indent=1, default=str))


def cached_outputs(record: dict[str, Any] | None, digest: str) -> dict[str, str] | None:
    """The outputs of a finished stage with this hash whose bytes are unchanged, else None."""
    if record is None or record.get("hash") != digest or record.get("status") not in ("done", "rejected"):
        return None
    outs = record.get("outputs", {})
    for o in outs.values():
        if not Path(o["path"]).exists() or content_digest(o["path"]) != o["sha256"]:
            return None
    return {k: o["path"] for k, o in outs.items()}


def _resolver(done: dict[str, StageOutcome], stage: str) -> Callable[[str, str], str]:
    def resolve(name: str, output: str) -> str:
        outputs = done[name].outputs
        if output not in outputs:
            raise PipelineError(
                f"stage {stage!r}: ${{{name}.{output}}}: stage {name!r} produced no {output!r} "
                f"(it produced: {', '.join(outputs) or 'nothing'})"
            )
        return outputs[output]

    return resolve


# ------------------------------------------------------------------ running
def run_pipeline(
    plan: Plan, force: set[str] | frozenset[str] = frozenset(), events: Events | None = None, console: Any = None
) -> PipelineResult:
    """Run the stages in order: cached ones are skipped, a rejected gate or a failed stage stops the rest.

    `force`: stage names to recompute even when cached. `events(stage, status, info)` receives
    pending / cached / running / log / done / failed / rejected / skipped as they happen.

    Raises:
        StageError: another process runs a pipeline in this run root.
    """
    from tempering.train.metrics import console as default_console

    events = events or (lambda *_: None)
    console = console or default_console
    unknown = set(force) - {s.name for s in plan.stages}
    if unknown:
        raise PipelineError(
            f"--force-stage {', '.join(sorted(unknown))}: no such stage in {plan.path} "
            f"(stages: {', '.join(s.name for s in plan.stages)})"
        )
    plan.root.mkdir(parents=True, exist_ok=True)
    with run_lock(plan.root):
        run_id = _record_pipeline_start(plan)
        if plan.tracks is None:
            status, outcomes = _run_stages(plan, plan.stages, force, events, console)
            attempts: list[dict[str, Any]] = []
        else:
            status, outcomes, attempts = _run_attempts(plan, force, events, console)
        _record_pipeline_end(plan, run_id, status, outcomes, attempts)
    return PipelineResult(status, outcomes, run_id, attempts)


def _run_stages(
    plan: Plan, stages: list[PlannedStage], force: set[str] | frozenset[str], events: Events, console: Any
) -> tuple[str, list[StageOutcome]]:
    """One pass over the stages: a failed stage or a rejected gate skips the rest."""
    outcomes: list[StageOutcome] = []
    done: dict[str, StageOutcome] = {}
    status = "passed"
    for stage in stages:
        if status != "passed":
            outcomes.append(StageOutcome(stage.name, stage.kind, "skipped"))
            events(stage.name, "skipped", {})
            continue
        outcome = _run_one(plan, stage, done, stage.name in force, events, console)
        outcomes.append(outcome)
        done[stage.name] = outcome
        if outcome.status in ("failed", "rejected"):
            status = outcome.status
    return status, outcomes


def _run_attempts(
    plan: Plan, force: set[str] | frozenset[str], events: Events, console: Any
) -> tuple[str, list[StageOutcome], list[dict[str, Any]]]:
    """Run the tracks' attempts: while the rebalance gate rejects and the budget lasts, rebalance and rerun
    (unchanged stages are cached). Each attempt's state, verdict and actions are returned and recorded."""
    assert plan.tracks is not None
    tracks = plan.tracks
    state = tracks.initial_state()
    attempts: list[dict[str, Any]] = []
    stages = plan.stages
    while True:
        status, outcomes = _run_stages(plan, stages, force, events, console)
        gate = next((o for o in outcomes if o.name == tracks.rebalance.gate), None)
        merge = next((o for o in outcomes if o.name == tracks.rebalance.merge), None)
        verdict = _verdict(gate)
        attempts.append(
            {
                "attempt": len(attempts) + 1,
                "status": status,
                "tracks": {t: s.to_dict() for t, s in state.items()},
                "candidate": merge.outputs.get("final") if merge else None,
                "verdict": gate.outputs.get("verdict") if gate else None,
                "failed_rules": [r["rule"] for r in verdict.get("rules", []) if not r.get("passed")],
            }
        )
        if status != "rejected" or gate is None or gate.status != "rejected":
            break
        if len(attempts) >= tracks.rebalance.max_attempts:
            attempts[-1]["actions"] = [f"budget spent: max_attempts {tracks.rebalance.max_attempts}"]
            break
        decision = rebalance_step(tracks, state, verdict)
        tried = [a["tracks"] for a in attempts]
        if decision.actions and {t: s.to_dict() for t, s in decision.state.items()} in tried:
            decision.actions.append("that state was tried already")
            attempts[-1]["actions"] = decision.actions
            break
        attempts[-1]["actions"] = decision.actions or ["nothing left to rebalance"]
        if not decision.actions:
            break
        for line in decision.actions:
            events(tracks.rebalance.gate, "log", {"line": f"rebalance: {line}"})
        state, force = decision.state, frozenset()
        stages = attempt_stages(tracks, state)
    _record_rebalance(plan, attempts, status)
    return status, outcomes, attempts


def _verdict(gate: StageOutcome | None) -> dict[str, Any]:
    path = gate.outputs.get("verdict") if gate else None
    if not path:
        return {}
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _record_rebalance(plan: Plan, attempts: list[dict[str, Any]], status: str) -> None:
    """The attempts as one `rebalance` run: every candidate and verdict an input, so `temper lineage`
    of the final model lists the attempts that led to it."""
    inputs = []
    for a in attempts:
        if a["candidate"]:
            inputs.append(describe_input(a["candidate"], "base_model"))
        if a["verdict"]:
            inputs.append(describe_input(a["verdict"], "eval"))
    assert plan.tracks is not None
    config = {
        "tracks": {t: s.model_dump() for t, s in plan.tracks.tracks.items()},
        "rebalance": plan.tracks.rebalance.model_dump(),
    }
    final = attempts[-1]["candidate"]
    with Registry.open(plan.root) as registry:
        run_id = registry.start(
            f"rebalance-{plan.path.stem}-{time.strftime('%Y%m%d-%H%M%S')}", "rebalance", config, inputs, None
        )
        registry.finish(
            run_id,
            {},
            {
                "status": status,
                "final": str(Path(final).resolve()) if final else None,
                "attempts": attempts,
            },
        )


def _run_one(
    plan: Plan, stage: PlannedStage, done: dict[str, StageOutcome], force: bool, events: Events, console: Any
) -> StageOutcome:
    spec = stage.spec
    try:
        keys = _substitute(stage.keys, _resolver(done, stage.name))
        digest, doc = stage_identity(plan, stage, keys)
    except (PipelineError, OSError) as exc:
        events(stage.name, "failed", {"error": str(exc)})
        return StageOutcome(stage.name, stage.kind, "failed", error=str(exc))
    name = f"{stage.name}-{digest[:12]}"
    run_dir = plan.root / name
    record = read_record(run_dir)
    cached = None if force else cached_outputs(record, digest)
    if cached is not None and record is not None:
        events(stage.name, "cached", {"hash": digest, "run_dir": run_dir, "status": record["status"]})
        return StageOutcome(
            stage.name,
            stage.kind,
            record["status"] if record["status"] == "rejected" else "cached",
            digest,
            run_dir,
            cached,
            record.get("summary", {}),
        )
    interrupted = record is not None and record.get("hash") == digest and record.get("status") in ("running", "failed")
    if run_dir.exists() and (force or not (interrupted and spec.resumable)):
        shutil.rmtree(run_dir)  # stale, tampered, forced, or an interrupted stage that cannot resume: start clean
    _close_interrupted(plan.root, name)
    base = {"stage": stage.name, "kind": stage.kind, "hash": digest, "identity": doc, "pipeline": str(plan.path)}
    base["started_at"] = time.time()  # kept in the final record too: a stage's duration reads from it
    write_record(run_dir, {**base, "status": "running"})
    events(stage.name, "running", {"hash": digest, "run_dir": run_dir, "steps": _steps(spec, keys)})
    ctx = StageContext(plan.root, name, console, lambda line: events(stage.name, "log", {"line": line}))
    try:
        outputs, summary = spec.run(spec.build(keys, plan.root, name), ctx)
    except Exception as exc:
        return _failed(stage, exc, digest, run_dir, base, events)
    status = "rejected" if stage.kind == "gate" and not summary.get("passed") else "done"
    digests = {k: {"path": str(p), "sha256": content_digest(p)} for k, p in outputs.items() if Path(p).exists()}
    write_record(
        run_dir, {**base, "status": status, "outputs": digests, "summary": _small(summary), "finished_at": time.time()}
    )
    events(stage.name, status, {"hash": digest, "run_dir": run_dir, "summary": summary})
    return StageOutcome(
        stage.name, stage.kind, status, digest, run_dir, {k: d["path"] for k, d in digests.items()}, summary
    )


def _failed(
    stage: PlannedStage, exc: Exception, digest: str, run_dir: Path, base: dict[str, Any], events: Events
) -> StageOutcome:
    """A stage that raised: bad input is its one-line error; a bug also keeps its traceback in
    the stage's `crash.log`, named in the record, so the error line is never all there is to go on."""
    error = one_line(exc)
    crash = None if is_user_error(exc) else write_crash_log(exc, run_dir)
    extra = {"crash_log": str(crash)} if crash else {}
    write_record(run_dir, {**base, "status": "failed", "error": error, **extra})
    events(stage.name, "failed", {"error": error, **extra})
    return StageOutcome(stage.name, stage.kind, "failed", digest, run_dir, error=error, crash_log=crash)


def _steps(spec: Any, keys: dict[str, Any]) -> int | None:
    node: Any = keys
    for part in (spec.steps_key or "").split("."):
        node = node.get(part) if isinstance(node, dict) and part else None
    return node if isinstance(node, int) else None


def _small(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary without long lists (the run's own summary.json keeps everything)."""
    return {k: v for k, v in summary.items() if not (isinstance(v, list) and len(v) > 50)}


def _close_interrupted(root: Path, name: str) -> None:
    """A registry row left `running` by a killed process is marked failed (interrupted) before the retry."""
    if not os.environ.get(REGISTRY_ENV) and not (root / REGISTRY_FILE).is_file():
        return
    with Registry.open(root) as registry:
        for run in registry.list(limit=1_000_000):
            if run["name"] == name and run["status"] == "running":
                registry.fail(
                    run["id"],
                    "interrupted: the pipeline process stopped before this stage finished; "
                    "a later `temper run` resumed or restarted it",
                )


def _record_pipeline_start(plan: Plan) -> str:
    with Registry.open(plan.root) as registry:
        for run in registry.list(limit=1_000_000):
            if run["kind"] == "pipeline" and run["status"] == "running":  # we hold the root lock: it is dead
                registry.fail(run["id"], "interrupted: the pipeline process stopped")
        config = {
            "file": str(plan.path),
            "out": str(plan.root),
            "seed": plan.seed,
            "stages": {s.name: {"kind": s.kind, **s.keys} for s in plan.stages},
        }
        return registry.start(
            f"pipeline-{plan.path.stem}-{time.strftime('%Y%m%d-%H%M%S')}", "pipeline", config, [], None
        )


def _record_pipeline_end(
    plan: Plan, run_id: str, status: str, outcomes: list[StageOutcome], attempts: list[dict[str, Any]]
) -> None:
    stages = {
        o.name: {
            "kind": o.kind,
            "status": o.status,
            "hash": o.hash,
            "run": o.run_dir.name if o.run_dir else None,
            **({"error": o.error} if o.error else {}),
            **({"crash_log": str(o.crash_log)} if o.crash_log else {}),
        }
        for o in outcomes
    }
    verdicts = {
        o.name: {k: o.summary.get(k) for k in ("verdict", "failed_rules", "candidate")}
        for o in outcomes
        if o.kind == "gate" and o.summary
    }
    outputs = {o.name: str(o.run_dir) for o in outcomes if o.run_dir is not None}
    with Registry.open(plan.root) as registry:
        if status == "failed":
            failed = next(o for o in outcomes if o.status == "failed")
            crash = f" (traceback in {failed.crash_log})" if failed.crash_log else ""
            registry.fail(run_id, f"stage {failed.name}: {failed.error}{crash}")
        else:
            metrics = {"status": status, "stages": stages, "gates": verdicts}
            registry.finish(run_id, outputs, {**metrics, "attempts": attempts} if attempts else metrics)


# ------------------------------------------------------------------ the plan, without running
def dry_run(plan: Plan) -> list[dict[str, Any]]:
    """Each stage's hash and whether it is cached, without running anything.

    A stage below one that must run has no hash yet (its inputs' bytes do not exist): its
    status says which stage it waits for.
    """
    rows, known = [], {}
    for stage in plan.stages:
        row: dict[str, Any] = {"stage": stage.name, "kind": stage.kind, "hash": None, "run_dir": None}
        blocked = next((s for s, _ in stage.refs if s not in known), None)
        if blocked is not None:
            row["status"] = f"after {blocked}"
            rows.append(row)
            continue
        keys = _substitute(stage.keys, lambda s, o: known[s].get(o, f"<{s} has no {o}>"))
        digest, _ = stage_identity(plan, stage, keys)
        run_dir = plan.root / f"{stage.name}-{digest[:12]}"
        record = read_record(run_dir)
        cached = cached_outputs(record, digest)
        if cached is not None and record is not None:
            known[stage.name] = cached
            status = "cached" + (" (rejected)" if record["status"] == "rejected" else "")
        else:
            resumable = record is not None and record.get("hash") == digest and stage.spec.resumable
            status = "resumes" if resumable else "runs"
        rows.append({**row, "hash": digest, "run_dir": str(run_dir), "status": status})
    return rows
