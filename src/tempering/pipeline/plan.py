"""Reading and validating a pipeline file (`temper run`): every check happens before any work.

The file: `out` (run root), `seed`, and `stages`, a mapping (or a list of `{name: ...}`) of
named stages in run order, each `{kind: <kind>, <the kind's config keys>}` (the stage table
is `pipeline.stages.stage_kinds()`). A value `${stage.output}` refers to an earlier stage's
output (a file or dir path), e.g. `data: {train: ["${synth.sft}"]}` or `model: ${sft.final}`.

Checked here, each a one-line `PipelineError` naming the file, stage and key: unknown kinds
and keys (the kind's config model rejects them), keys the runner owns (`out`, `name`),
missing input files and local models, references to an unknown or later stage or an output
the stage kind does not have, eval suites that do not load, gate rules that do not parse.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml
from pydantic import ValidationError

from tempering.agents.harbor import PREFIX as HARBOR_PREFIX
from tempering.agents.tasks import BUILTIN as BUILTIN_AGENT_SUITES
from tempering.config import PipelineConfig
from tempering.errors import UserError
from tempering.evals.agent_suites import PREFIX as AGENT_PREFIX
from tempering.evals.agent_suites import heldout_tasks, is_agent_suite
from tempering.models.checkpoints import CheckpointError, is_checkpoint_spec
from tempering.pipeline.stages import StageKind, stage_kinds
from tempering.pipeline.tracks import TracksError, TracksPlan, attempt_stages, check_tracks
from tempering.sources.registry import is_source_name

REF = re.compile(r"\$\{([^{}]*)\}")
_REF_PARTS = re.compile(r"([A-Za-z0-9][A-Za-z0-9_]*)\.([A-Za-z0-9_]+)")
_STAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]{0,63}")


class PipelineError(UserError):
    """A pipeline that cannot run; the message is one line naming the file, stage and key."""


@dataclass
class PlannedStage:
    """One validated stage: its name, kind, and keys (relative paths resolved, references kept)."""

    name: str
    kind: str
    keys: dict[str, Any]
    refs: list[tuple[str, str]]  # (stage, output) it refers to, in order

    @property
    def spec(self) -> StageKind:
        return stage_kinds()[self.kind]


@dataclass
class Plan:
    """A validated pipeline (with `tracks`: `stages` are the first attempt's, see pipeline/tracks.py)."""

    path: Path
    root: Path
    seed: int
    stages: list[PlannedStage]
    tracks: TracksPlan | None = None


# ------------------------------------------------------------------ dotted keys
def walk(data: Any, dotted: str, fn: Callable[[Any, str], Any], where: str = "") -> None:
    """Replace every value at `dotted` (`*` walks a list; list values are walked too) by `fn(value, key)`."""
    head, _, rest = dotted.partition(".")
    if head == "*":
        if isinstance(data, list):
            for i, item in enumerate(data):
                walk(item, rest, fn, f"{where}.{i}" if where else str(i))
        return
    if not isinstance(data, dict) or data.get(head) is None:
        return
    key = f"{where}.{head}" if where else head
    if rest:
        walk(data[head], rest, fn, key)
    elif isinstance(data[head], list):
        data[head] = [fn(v, f"{key}.{i}") if isinstance(v, str) else v for i, v in enumerate(data[head])]
    elif isinstance(data[head], str):
        data[head] = fn(data[head], key)


def is_file_value(value: str, dotted: str) -> bool:
    """Whether an input value names a file or dir (not a built-in task source or suite name)."""
    if REF.search(value):
        return True
    if dotted.endswith(("tasks.source", "pool.source")) and is_source_name(value):
        return False
    if dotted.split(".")[0] in ("suites", "against"):
        if is_agent_suite(value):  # a suite name; a task file it names is resolved by `_resolve`
            return False
        return Path(value).suffix in (".yaml", ".yml") or "/" in value
    return True


def is_model_path(value: str) -> bool:
    """A model spec that names a local file or dir, a checkpoint spec included (`runs/NAME@best`,
    `runs/NAME/checkpoints/step-40`); an alias or hub id is not checked."""
    return (
        value.startswith((".", "/", "~"))
        or value.endswith(".gguf")
        or is_checkpoint_spec(value)
        or Path(value).expanduser().exists()
    )


# ------------------------------------------------------------------ loading and validation
def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise PipelineError(f"{path}: pipeline file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PipelineError(f"{path}: not a readable YAML file ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise PipelineError(f"{where}: invalid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise PipelineError(f"{path}: the top level must be a mapping (out, seed, stages)")
    stages = data.get("stages")
    if isinstance(stages, list):  # the list form: [{name: x, kind: ...}, ...]
        named: dict[str, Any] = {}
        for i, item in enumerate(stages):
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise PipelineError(f"{path}: stages.{i}: each stage of the list form needs a 'name'")
            if item["name"] in named:
                raise PipelineError(f"{path}: stage {item['name']!r} appears twice")
            named[item["name"]] = {k: v for k, v in item.items() if k != "name"}
        data["stages"] = named
    return data


def load_plan(path: str | Path, seed: int | None = None) -> Plan:
    """Read and validate a pipeline file; nothing runs and nothing is written.

    `seed` replaces the file's `seed` (the seed of every stage that sets none).

    Raises:
        PipelineError: one line naming the file, the stage and the key: an unknown kind or key,
            a missing input file, a reference to a later or unknown stage or output, a bad rule.
    """
    path = Path(path)
    data = _read(path)
    try:
        cfg = PipelineConfig.model_validate(data)
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = e["loc"][:2] if e["loc"][:1] == ("stages",) else e["loc"]  # a stage's own keys are checked below
        raise PipelineError(f"{path}: {'.'.join(map(str, loc))}: {e['msg']}") from None
    if seed is not None:
        cfg.seed = seed
    base = path.parent
    root = Path(cfg.out).expanduser().absolute()  # like every command's run root: relative to the cwd
    stages: list[PlannedStage] = []
    for name, keys in cfg.stages.items():
        stages.append(_check_stage(path, base, root, cfg.seed, name, keys, stages, set(cfg.stages)))
    try:
        tracks = check_tracks(cfg, stages)
    except TracksError as exc:
        raise PipelineError(f"{path}: {exc}") from None
    if tracks is None:
        return Plan(path, root, cfg.seed, stages)
    if tracks.rebalance.replay is not None:
        replay = tracks.rebalance.replay
        replay.data = [
            _resolve(str(path), base, p, f"rebalance.replay.data.{i}", False) for i, p in enumerate(replay.data)
        ]
    return Plan(path, root, cfg.seed, attempt_stages(tracks, tracks.initial_state()), tracks)


def _check_stage(
    path: Path, base: Path, root: Path, seed: int, name: str, keys: Any, earlier: list[PlannedStage], names: set[str]
) -> PlannedStage:
    where = f"{path}: stage {name!r}"
    if not _STAGE_NAME.fullmatch(name):
        raise PipelineError(
            f"{where}: a stage name is letters, digits and '_' (at most 64), starting with a letter or digit"
        )
    kinds = stage_kinds()
    if not isinstance(keys, dict) or "kind" not in keys:
        raise PipelineError(f"{where}: needs 'kind' (one of {', '.join(kinds)})")
    keys = dict(keys)
    kind = keys.pop("kind")
    if kind not in kinds:
        raise PipelineError(f"{where}: unknown kind {kind!r} (known: {', '.join(kinds)})")
    spec = kinds[kind]
    for key in spec.owned:
        if key in keys:
            raise PipelineError(
                f"{where}: key {key!r} is set by the pipeline (runs go under the pipeline's out); remove it"
            )
    refs = _check_refs(where, keys, earlier, names)
    for dotted in spec.inputs + spec.models:
        walk(keys, dotted, lambda v, k, dotted=dotted: _resolve(where, base, v, k, dotted in spec.models))
    if spec.seed_key:
        _default(keys, spec.seed_key, seed)
    placeholder = _substitute(keys, lambda stage, out: str(root / f"{stage}-<hash>" / out))
    try:
        cfg = spec.build(placeholder, root, f"{name}-0")
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(map(str, e["loc"])) or "(stage)"
        raise PipelineError(f"{where} ({kind}): {loc}: {e['msg']}") from None
    _check_semantics(where, kind, cfg)
    return PlannedStage(name, kind, keys, refs)


def _check_refs(
    where: str, keys: dict[str, Any], earlier: list[PlannedStage], names: set[str]
) -> list[tuple[str, str]]:
    before = {s.name: s for s in earlier}
    refs = []
    for dotted, text in _strings(keys):
        for ref in REF.findall(text):
            m = _REF_PARTS.fullmatch(ref.strip())
            if m is None:
                raise PipelineError(f"{where}: {dotted}: ${{{ref}}} is not a reference (write ${{stage.output}})")
            stage, out = m.groups()
            if stage not in before:
                later = (
                    "is this stage itself"
                    if f"stage {stage!r}" == where.rsplit(": ", 1)[-1]
                    else "runs later"
                    if stage in names
                    else "is not a stage of this pipeline"
                )
                raise PipelineError(
                    f"{where}: {dotted}: ${{{ref}}} refers to stage {stage!r}, which {later}; "
                    "a stage may only use the outputs of stages above it"
                )
            outputs = before[stage].spec.outputs
            if out not in outputs:
                raise PipelineError(
                    f"{where}: {dotted}: ${{{ref}}}: stage {stage!r} ({before[stage].kind}) has no "
                    f"output {out!r} (outputs: {', '.join(outputs)})"
                )
            refs.append((stage, out))
    return refs


def _strings(data: Any, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _strings(v, f"{where}.{k}" if where else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _strings(v, f"{where}.{i}")
    elif isinstance(data, str):
        yield where, data


def _resolve(where: str, base: Path, value: str, key: str, model: bool) -> str:
    """A relative input path against the pipeline file's dir; a missing one is an error."""
    if not model and key.split(".")[0] == "suites" and is_agent_suite(value) and not REF.search(value):
        name = value.removeprefix(AGENT_PREFIX)  # `agent:PATH.jsonl`: the path against the pipeline file
        if name.startswith(HARBOR_PREFIX):  # `agent:harbor:DIR`: the folder likewise
            folder = Path(name.removeprefix(HARBOR_PREFIX)).expanduser()
            folder = folder if folder.is_absolute() else Path(os.path.normpath(base / folder))
            if not folder.is_dir():
                raise PipelineError(f"{where}: {key}: Harbor task folder not found: {folder}")
            return AGENT_PREFIX + HARBOR_PREFIX + str(folder)
        return value if name in BUILTIN_AGENT_SUITES else AGENT_PREFIX + _resolve(where, base, name, key, False)
    if REF.search(value) or (model and not is_model_path(value)) or (not model and not is_file_value(value, key)):
        return value
    from tempering.runs.registry import model_dir

    p = Path(value).expanduser()
    p = p if p.is_absolute() else Path(os.path.normpath(base / p))
    try:  # a model in any spelling: `runs/NAME@step-40` is `runs/NAME/checkpoints/step-00000040`
        found = model_dir(p) if model else p
    except CheckpointError as exc:
        raise PipelineError(f"{where}: {key}: {exc}") from None
    if not found.exists():
        raise PipelineError(f"{where}: {key}: {'model' if model else 'file'} not found: {p}")
    return str(p)


def _default(keys: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = keys
    for p in parents:
        if not isinstance(node.get(p), dict):
            if p in node and node[p] is not None:
                return  # not a section: validation will say so
            node[p] = {}
        node = node[p]
    node.setdefault(leaf, value)


def _substitute(data: Any, fn: Callable[[str, str], str]) -> Any:
    """A copy with every `${stage.output}` replaced by `fn(stage, output)`."""
    if isinstance(data, dict):
        return {k: _substitute(v, fn) for k, v in data.items()}
    if isinstance(data, list):
        return [_substitute(v, fn) for v in data]
    if isinstance(data, str):
        return REF.sub(lambda m: fn(*_ref_parts(m.group(1))), data)
    return data


def _ref_parts(ref: str) -> tuple[str, str]:
    """(stage, output) of a reference `_check_refs` accepted."""
    m = _REF_PARTS.fullmatch(ref.strip())
    assert m is not None, ref
    return m.group(1), m.group(2)


def _check_semantics(where: str, kind: str, cfg: Any) -> None:
    """Checks beyond the config model: suites exist, gate rules parse, mix source names are unique."""
    from tempering.config import ConfigError
    from tempering.evals.suite import load_suite

    try:
        if kind == "gate":
            from tempering.pipeline.stages import gate_rules

            gate_rules(cfg, where)
        elif kind in ("eval", "data.decontam"):
            for s in cfg.suites if kind == "eval" else cfg.against:
                if kind == "eval" and is_agent_suite(s):  # the same dispatch as `evaluate_config`
                    heldout_tasks(s)
                elif not REF.search(s):
                    load_suite(s)
        elif kind == "data.mix":
            from tempering.recipes.mix import check_config

            check_config(cfg)
    except (UserError, ConfigError, FileNotFoundError) as exc:  # a suite, rule or agent task file
        msg = " ".join(str(exc).split())
        raise PipelineError(msg if msg.startswith(where) else f"{where}: {msg}") from None
