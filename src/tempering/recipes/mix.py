"""`temper data mix`: load sources, count tokens, plan and draw the mix, write it, record the run.

The mixing itself is `data/mixing.py` (pure, seeded); this file wires files, the tokenizer,
the quarantine, the atomic write and the registry around it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from tempering.atomic import write_jsonl_atomic
from tempering.config import ConfigError, MixConfig, load_config
from tempering.data.io import NoRows, RowError, iter_rows, write_quarantine
from tempering.data.mixing import MixSource, draw_mix, mix_report, plan_mix, row_text, word_count
from tempering.data.safety import row_problem
from tempering.errors import InputNotFound, UserError
from tempering.runs.stage import StageSpec, input_list, run_stage


class MixOffTarget(UserError):
    """The realised shares missed the effective ones by more than the tolerance."""


def load_mix_config(
    path: str | Path, overrides: Sequence[str] = (), literal: dict[str, Any] | None = None
) -> MixConfig:
    """`load_config` plus: relative source and replay paths written in the file resolve against
    its directory (paths set by `--set` stay relative to the working directory)."""
    cfg: MixConfig = load_config(MixConfig, path, overrides, literal)
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return cfg
    base = Path(path).parent
    given_sources = raw.get("sources")
    file_sources = given_sources if isinstance(given_sources, list) else []
    for src, given in zip(cfg.sources, file_sources):
        if isinstance(given, dict) and _as_list(given.get("data")) == src.data:
            src.data = [_resolve(p, base) for p in src.data]
    replay = raw.get("replay")
    if cfg.replay is not None and isinstance(replay, dict) and _as_list(replay.get("data")) == cfg.replay.data:
        cfg.replay.data = [_resolve(p, base) for p in cfg.replay.data]
    if cfg.output is not None and raw.get("output") == cfg.output:
        cfg.output = _resolve(cfg.output, base)
    return cfg


def _as_list(v: Any) -> list:
    return [v] if isinstance(v, str) else list(v or [])


def _resolve(p: str, base: Path) -> str:
    q = Path(p).expanduser()
    return str(q) if q.is_absolute() else str(base / q)


def token_counter(spec: str | None) -> Callable[[list[str]], list[int]]:
    """Counts tokens with the model's tokenizer (`spec`), or whitespace words when None."""
    if spec is None:
        return lambda texts: [word_count(t) for t in texts]
    from tempering.models.load import load_tokenizer

    tok = load_tokenizer(spec)
    return lambda texts: [len(ids) for ids in tok(texts, add_special_tokens=False)["input_ids"]]


def read_source(paths: list[str], errors: list[RowError], track: str = "general") -> list[Any]:
    """Every JSON-object row of `paths`; unparsable and non-object rows go to `errors`, and so do
    rows of a `safety` source without a known category and label (`data.safety.row_problem`)."""
    rows = []
    for p in paths:
        if not Path(p).exists():
            raise InputNotFound(f"{p}: no such data file")
        for where, row, parse_error in iter_rows(p):
            if parse_error is not None:
                errors.append(RowError(str(p), where, str(parse_error), row))
            elif not isinstance(row, dict):
                errors.append(RowError(str(p), where, f"row is not a JSON object (got {type(row).__name__})", row))
            elif track == "safety" and (problem := row_problem(row)) is not None:
                errors.append(RowError(str(p), where, problem, row))
            else:
                rows.append(row)
    return rows


def load_sources(cfg: MixConfig, count: Callable[[list[str]], list[int]]) -> tuple[list[MixSource], list[RowError]]:
    errors: list[RowError] = []
    sources = []
    specs = [(s.name, s.data, s.track, s.weight, s.max_epochs, False) for s in cfg.sources]
    if cfg.replay is not None:
        r = cfg.replay
        specs.append((r.name, r.data, "general", 1.0, r.max_epochs, True))
    for name, data, track, weight, max_epochs, replay in specs:
        rows = read_source(data, errors, track)
        if not rows:
            raise NoRows(f"{', '.join(data)}: source {name!r} has no valid rows")
        sources.append(MixSource(name, track, weight, rows, count([row_text(r) for r in rows]), max_epochs, replay))
    return sources, errors


def mix_stage(cfg: MixConfig, force: bool = False) -> StageSpec:
    inputs = input_list(
        [(p, "train") for s in cfg.sources for p in s.data]
        + [(p, "replay") for p in (cfg.replay.data if cfg.replay else [])]
    )
    return StageSpec("mix", cfg.out, cfg.name, cfg.model_dump(), inputs, None, 1, cfg.seed, None, force)


def run_mix(cfg: MixConfig, force: bool = False) -> dict[str, Any]:
    """Make the mix, write it atomically with its checksum, record the run; returns the summary.

    Raises:
        MixOffTarget: a realised share is off its effective share by more than `cfg.tolerance`.
    """
    with run_stage(mix_stage(cfg, force)) as stage:
        if stage.finished:
            return stage.summary
        sources, errors = load_sources(cfg, token_counter(cfg.tokenizer))
        if errors:
            write_quarantine(errors, stage.run_dir / "quarantine.jsonl")
        plan = plan_mix(sources, cfg.size, cfg.by, cfg.replay.ratio if cfg.replay else None)
        rows = draw_mix(sources, plan, cfg.seed, cfg.epoch)
        report = mix_report(sources, plan, rows)
        if report["max_abs_error_effective"] > cfg.tolerance:
            raise MixOffTarget(
                f"realised shares miss the effective ones by {report['max_abs_error_effective']:.4f} "
                f"(> tolerance {cfg.tolerance})"
            )
        output = Path(cfg.output) if cfg.output else stage.run_dir / "mix.jsonl"
        written, digest = write_jsonl_atomic(output, (m.row for m in rows), sidecar=True)
        stage.record_output("mix", output)
        # the provenance of every row: (source, row index in the source), in mix order
        write_jsonl_atomic(
            stage.run_dir / "mix_index.jsonl", ({"source": m.source, "index": m.index} for m in rows), sidecar=True
        )
        summary = {
            "steps": 1,
            "output": str(output),
            "sha256": digest,
            "written": written,
            "quarantined": len(errors),
            "seed": cfg.seed,
            "epoch": cfg.epoch,
            "token_unit": cfg.tokenizer or "whitespace words",
            **report,
        }
        stage.finish(summary, {"mix": str(output)})
    return stage.summary


def check_config(cfg: MixConfig) -> None:
    names = [s.name for s in cfg.sources] + ([cfg.replay.name] if cfg.replay else [])
    if len(set(names)) != len(names):
        raise ConfigError(f"sources: names must be unique, got {names}")
