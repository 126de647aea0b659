"""The stage runner: the run bookkeeping every training recipe shares, written once.

    with run_stage(StageSpec(...)) as stage:
        if stage.finished:            # re-running a finished run: nothing to do
            return stage.result.summary
        ... build components, trainer.fit() ...
        stage.save_model(model, tokenizer)
        stage.finish(summary, outputs)
    return stage.result.summary

`run_stage` owns, in this order: the run name (validated: it must stay inside the run
root), an exclusive lock on the run dir (a second process on the same name gets a one-line
error naming the holder), the resume rules (a changed config is refused with its diff
unless forced; a finished run is reported, not redone), the checkpoints (the newest
*verified* one is what a resume loads), the registry row (start / finish / fail, inputs
with their roles), the seed and thread count, the final save (with its marker, so lineage
can find the run from the model dir) and `summary.json`.

Under torchrun only rank 0 does this bookkeeping; it tells the other ranks the run's name
and whether there is work to do (or the one-line error it stopped on), and their `Stage`
writes nothing (train/distributed.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from tempering.atomic import write_text_atomic
from tempering.config.base import run_name_problem
from tempering.errors import UserError, crashes_into
from tempering.runs import REGISTRY_FILE
from tempering.runs.registry import Input, Registry, describe_input
from tempering.tracking.events import metrics_path
from tempering.train import distributed  # no torch until a process group is joined

LOCK_FILE = ".lock"
CONFIG_FILE = "run_config.json"
SUMMARY_FILE = "summary.json"
# Fields a resume may change without changing what is trained: how long, how often to save
# and log, where the run root is, how many threads.
RESUMABLE_CHANGES = (
    "name",
    "out",
    "train.steps",
    "train.max_minutes",
    "train.threads",
    "train.log_every",
    "train.loggers",
    "train.compile",
    "train.checkpoint.every",
    "train.checkpoint.keep_last",
    "train.eval_every",
    "heldout.every",  # GRPO's schedule before train.eval_every: a run recorded with it still resumes
    "train.resume_from",
)
# Keys a recorded config may still hold, and the keys that replaced them (with the value they
# held then): a run recorded with a retired spelling resumes under the new one.
RETIRED_KEYS: dict[str, Callable[[Any], dict[str, Any]]] = {
    "grpo.rollout_ahead": lambda ahead: {"grpo.max_off_policy_steps": int(bool(ahead)), "grpo.stale": "drop"},
}


class StageError(UserError):
    """A stage that refuses to start; the message is one line for the user."""


class InvalidRunName(StageError):
    """A run name that is empty, hidden, or would leave the run root."""


class RunLocked(StageError):
    """Another process holds the run dir."""


class ConfigChanged(StageError):
    """Resuming a run with a config that differs from the one it started with."""


@dataclass
class StageSpec:
    """What a recipe tells the runner about its stage."""

    kind: str  # sft | grpo | ...
    out: str  # run root
    name: str | None  # None: <kind>-<timestamp>
    config: dict[str, Any]  # the validated config, dumped
    inputs: list[Input]  # with roles (see pipeline.registry.ROLES)
    base_model: str | None
    steps: int  # the target step count (a finished run has reached it)
    seed: int = 0
    threads: int | str | None = None  # a `threads` setting: a count, "auto" or None
    force: bool = False  # resume even when the config changed


@dataclass
class StageResult:
    """What a stage produced."""

    run_id: str | None
    name: str
    run_dir: Path
    final: Path | None
    summary: dict[str, Any] = field(default_factory=dict)
    already_finished: bool = False


def validate_run_name(name: str) -> str:
    """The name if it is a plain directory name; else `InvalidRunName` saying why
    (`config.run_name_problem`: the rule configs check at load)."""
    problem = run_name_problem(name)
    if problem is not None:
        raise InvalidRunName(problem)
    return name


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive flock on `run_dir/.lock` (non-blocking: a second holder gets `RunLocked`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise RunLocked(
                f"run dir {run_dir} is in use by another process (pid {holder}); wait for it "
                "to finish or pick another --name"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def config_diff(old: dict[str, Any], new: dict[str, Any], ignore: tuple[str, ...] = RESUMABLE_CHANGES) -> list[str]:
    """`key: old -> new` for every leaf that differs, dotted keys, leaving out `ignore`."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    for key, spelled_now in RETIRED_KEYS.items():
        if key in flat_old and key not in flat_new:
            flat_old = {k: v for k, v in flat_old.items() if k != key} | spelled_now(flat_old[key])
    keys = sorted(set(flat_old) | set(flat_new))
    return [
        f"{k}: {flat_old.get(k)!r} -> {flat_new.get(k)!r}"
        for k in keys
        if flat_old.get(k) != flat_new.get(k) and not any(k == i or k.startswith(i + ".") for i in ignore)
    ]


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(_flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


class Stage:
    """The live run handed to a recipe's body."""

    def __init__(self, spec: StageSpec, name: str, run_dir: Path, registry: Registry | None):
        self.spec, self.name, self.run_dir, self.registry = spec, name, run_dir, registry
        self.writes = registry is not None  # False on torchrun ranks other than 0
        self.run_id: str | None = None
        self.result: StageResult | None = None

    @property
    def finished(self) -> bool:
        """True when this name already finished with this config: the body has nothing to do."""
        return self.result is not None and self.result.already_finished

    def lineage(self) -> dict[str, str]:
        """The run's lineage as flat string tags for experiment trackers: run id and name, kind, the
        registry, and each recorded input (`input.<role>.<n>`: path, sha256 and parent run where known)."""
        if self.registry is None or self.run_id is None:  # a rank that records nothing, or not started
            return {}
        tags = {
            "run_id": self.run_id,
            "run_name": self.name,
            "kind": self.spec.kind,
            "registry": self.registry.location,
            "run_dir": str(self.run_dir.resolve()),
        }
        seen: dict[str, int] = {}
        for i in self.registry.inputs(self.run_id):
            n = seen[i.role] = seen.get(i.role, -1) + 1
            tags[f"input.{i.role}.{n}"] = i.path
            for key, value in (("sha256", i.sha256), ("parent_run", i.parent_run)):
                if value:
                    tags[f"input.{i.role}.{n}.{key}"] = value
        return tags

    def save_model(self, model: Any, tokenizer: Any, role: str = "final", state_dict: dict | None = None) -> Path:
        """Save the model (a PEFT adapter or a full model) to `run_dir/<role>`: `final` at the end
        (recorded and marked with the run now), `best` whenever `train.keep_best` finds a better
        one (recorded once, by `finish`). `state_dict`: the tensors to write when the model's own are
        sharded (`train.fsdp`: gathered to rank 0)."""
        from tempering.models.rope import record_scaling

        path = self.run_dir / role
        if not self.writes:
            return path
        lora = hasattr(model, "peft_config")
        kwargs = {"save_embedding_layers": False} if lora else {}
        model.save_pretrained(path, **kwargs, **({"state_dict": state_dict} if state_dict is not None else {}))
        tokenizer.save_pretrained(path)
        record_scaling(model, path)  # an adapter's base is unscaled: loading it re-applies this
        if role == "final":
            self.record_output(role, path)
        return path

    @property
    def summary(self) -> dict[str, Any]:
        """The run's summary: the recorded one of a finished run, or this one's once `finish` ran."""
        if self.result is None:
            raise RuntimeError(f"stage {self.name}: no result yet (the recipe has not called finish())")
        return self.result.summary

    def record_output(self, role: str, path: str | Path) -> None:
        """Record one of this run's outputs in its registry row."""
        registry, run_id = self._row()
        registry.record_output(run_id, role, path)

    def _row(self) -> tuple[Registry, str]:
        """This run's registry and row id (rank 0, once `run_stage` has started the row)."""
        if self.registry is None or self.run_id is None:
            raise RuntimeError(f"stage {self.name}: no registry row on this rank")
        return self.registry, self.run_id

    def finish(self, summary: dict[str, Any], outputs: dict[str, str]) -> StageResult:
        """Write `summary.json`, record the run as finished, and return the typed result."""
        final = self.run_dir / "final"
        if not self.writes:
            self.result = StageResult(None, self.name, self.run_dir, None, summary)
            return self.result
        registry, run_id = self._row()
        summary = {
            "run_id": run_id,
            "run_dir": str(self.run_dir),
            "final": str(final) if final.is_dir() else None,
            **summary,
        }
        write_text_atomic(self.run_dir / SUMMARY_FILE, json.dumps(summary, indent=1))
        outputs = {"final": str(final), "metrics": str(metrics_path(self.run_dir)), **outputs}
        if (self.run_dir / "best").is_dir():
            registry.record_output(run_id, "best", self.run_dir / "best")
            outputs["best"] = str(self.run_dir / "best")
        registry.finish(run_id, outputs, summary)
        self.result = StageResult(run_id, self.name, self.run_dir, final if final.is_dir() else None, summary)
        return self.result


@contextmanager
def run_stage(spec: StageSpec) -> Iterator[Stage]:
    """Run one stage's bookkeeping around the recipe body (see the module docstring).

    Raises:
        StageError: bad name, run dir locked, config changed on resume (one line each).
        CheckpointError: no checkpoint of this run verifies.
    """
    if not distributed.init().main:
        yield from _follow_rank0(spec)
        return
    told = []  # whether the other ranks have heard how this stage starts

    def tell(stage: Stage) -> None:
        distributed.broadcast({"name": stage.name, "result": stage.result})
        told.append(True)

    try:
        name = validate_run_name(spec.name if spec.name is not None else time.strftime(f"{spec.kind}-%Y%m%d-%H%M%S"))
        root = Path(spec.out)
        run_dir = root / name
        with run_lock(run_dir), crashes_into(run_dir):  # a bug's traceback goes to the run's crash.log
            registry = Registry.open(root)  # root/registry.sqlite, or $TEMPERING_REGISTRY
            try:
                stage = Stage(spec, name, run_dir, registry)
                previous = _check_resume(spec, run_dir, registry)
                if previous is not None:
                    stage.result = previous
                    tell(stage)
                    yield stage
                    return
                yield from _run_body(stage, registry, tell)
            finally:
                registry.close()
    except BaseException as exc:
        if not told:
            distributed.broadcast({"error": str(exc)})
        raise


def _follow_rank0(spec: StageSpec) -> Iterator[Stage]:
    """`run_stage` on a torchrun rank other than 0: rank 0 decides, this rank writes nothing."""
    told = distributed.broadcast(None)
    if "error" in told:
        raise StageError(f"rank 0 stopped: {told['error']}")
    stage = Stage(spec, told["name"], Path(spec.out) / told["name"], None)
    stage.result = told["result"]
    if stage.result is None:
        _seed(spec.seed, spec.threads)
    yield stage


def _run_body(stage: Stage, registry: Registry, tell: Any) -> Iterator[Stage]:
    """The body of `run_stage` for a run that has work to do: checkpoints, registry row, seed."""
    from tempering.train.checkpoint import fall_back_to_verified, list_checkpoints
    from tempering.train.metrics import console

    spec, run_dir = stage.spec, stage.run_dir
    for aside in fall_back_to_verified(run_dir / "checkpoints"):
        console.print(
            f"[yellow]warning: checkpoint {aside.name.removeprefix('corrupt-')} failed verification; "
            f"set aside as {aside}, resuming from the previous verified one[/yellow]"
        )
    inputs = list(spec.inputs)
    previous = registry.latest(stage.name)
    resumed = previous["id"] if previous is not None and list_checkpoints(run_dir / "checkpoints") else None
    if resumed is not None:
        # a resume starts from the earlier attempt's weights: its lineage is this run's too
        inputs.append(Input(str(run_dir / "checkpoints"), "base_model", None, resumed))
    stage.run_id = run_id = registry.start(stage.name, spec.kind, spec.config, inputs, spec.base_model)
    if resumed is not None:  # an interrupted attempt is this run, resumed: one run in listings, not a failure
        registry.mark_resumed(resumed, run_id)
    registry.record_output(run_id, "run_dir", run_dir)
    write_text_atomic(run_dir / CONFIG_FILE, json.dumps(spec.config, indent=1))
    _seed(spec.seed, spec.threads)
    tell(stage)
    try:
        yield stage
        if stage.result is None:
            raise RuntimeError(f"stage {stage.name}: the recipe ended without stage.finish()")
    except BaseException as exc:
        registry.fail(run_id, f"{type(exc).__name__}: {exc}")
        raise


def _seed(seed: int, threads: int | str | None) -> None:
    import torch

    from tempering.models.threads import set_threads

    torch.manual_seed(seed)
    set_threads(threads)  # the trainer and the eval log the choice, once their model has loaded


def _check_resume(spec: StageSpec, run_dir: Path, registry: Registry) -> StageResult | None:
    """Refuse a changed config on resume; return the old result when the run is already finished."""
    from tempering.train.checkpoint import list_checkpoints

    summary_path = run_dir / SUMMARY_FILE
    if not list_checkpoints(run_dir / "checkpoints") and not summary_path.is_file():
        return None  # nothing to resume: a fresh start (or a retry of a run that failed early)
    latest = registry.latest(run_dir.name)
    saved = run_dir / CONFIG_FILE
    old = json.loads(saved.read_text()) if saved.is_file() else (latest or {}).get("config")
    new = json.loads(json.dumps(spec.config, default=str))  # tuples -> lists, as stored
    changes = config_diff(old, new) if old is not None else []
    if latest is not None:
        recorded = {i.path: i.sha256 for i in registry.inputs(latest["id"]) if i.sha256}
        changes += [
            f"{i.path}: content changed since the run started (sha256 {recorded[i.path][:12]}... -> {i.sha256[:12]}...)"
            for i in spec.inputs
            if i.sha256 and recorded.get(i.path, i.sha256) != i.sha256
        ]
    if changes and not spec.force:
        raise ConfigChanged(
            f"run {run_dir.name} exists with a different config ({'; '.join(changes)}); "
            "resume with the original config, pick another --name, or pass --force"
        )
    if summary_path.is_file():
        summary = json.loads(summary_path.read_text())
        target = spec.steps or summary.get("target_steps") or 0  # 0: steps derived from train.epochs
        if summary.get("stopped_early") or (summary.get("steps") or 0) >= target:
            from tempering.train.metrics import console

            console.print(
                f"run {run_dir.name} is already finished ({summary.get('steps')} steps); "
                f"summary: {summary_path}. Nothing to do (raise --steps to train further)."
            )
            final = Path(summary["final"]) if summary.get("final") else None
            return StageResult(summary.get("run_id"), run_dir.name, run_dir, final, summary, already_finished=True)
    return None


def input_list(pairs: Sequence[tuple[str | Path, str]]) -> list[Input]:
    """`describe_input` for each existing `(path, role)` (generated task sources have no file)."""
    return [describe_input(p, role) for p, role in pairs if Path(p).expanduser().exists()]


@contextmanager
def record_export(source: str | Path, out: str | Path, config: dict[str, Any]) -> Iterator[str | None]:
    """Record writing `out` from run output `source` (an export, a merge) in `source`'s registry.

    The new run's `base_model` input is `source` with its parent run, and `out` gets a marker:
    lineage walks from the exported dir back through the run that trained the adapter.
    A `source` that no Tempering run wrote is exported unrecorded (yields None).
    """
    from tempering.runs.registry import model_marker, registry_exists

    marker = model_marker(source)
    if marker is None or not registry_exists(marker["registry"]):
        yield None
        return
    with Registry(marker["registry"]) as registry:
        name = f"export-{marker['run']}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = registry.start(name, "export", config, [describe_input(source, "base_model")], str(source))
        try:
            yield run_id
        except BaseException as exc:
            registry.fail(run_id, f"{type(exc).__name__}: {exc}")
            raise
        registry.record_output(run_id, "merged", out)
        registry.finish(run_id, {"merged": str(Path(out).resolve())}, {})


def prune_failed(registry: Registry, root: Path) -> list[str]:
    """Remove failed runs of run root `root` whose run dir is gone; returns their names.

    A run belongs to `root` when its recorded run dir lies there; a run without one only
    when the registry is `root`'s own SQLite file (a shared server also holds other
    machines' runs, whose dirs are never here)."""
    own = registry.path is not None and registry.path.resolve() == (root / REGISTRY_FILE).resolve()

    def here(run: dict[str, Any]) -> bool:
        dirs = [Path(o["path"]) for o in registry.outputs(run["id"]) if o["role"] == "run_dir"]
        return dirs[0].parent == root.resolve() if dirs else own

    gone = [
        r
        for r in registry.list(limit=1_000_000)
        if r["status"] == "failed" and not (root / r["name"]).exists() and here(r)
    ]
    registry.remove([r["id"] for r in gone])
    return [r["name"] for r in gone]
