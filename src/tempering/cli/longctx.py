"""Long context: `temper model rope` (a RoPE-scaled copy of a model) and `temper data longctx`
(SFT rows of long-context tasks)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from tempering.cli.common import err, fail
from tempering.config import DEFAULT_MODEL


def model_rope(
    spec: str = typer.Argument(..., metavar="MODEL", help="A model: alias, HF dir, GGUF path or run output."),
    kind: str = typer.Option(..., "--type", help="linear, dynamic or yarn (transformers' rope types)."),
    factor: float = typer.Option(..., "--factor", help="New window / native window, > 1."),
    out_dir: Path = typer.Option(..., "--out", "-o", help="An empty dir for the scaled HF model."),
    original: Optional[int] = typer.Option(
        None, "--original-max-position-embeddings", help="The native window (default: the model's own)."
    ),
    beta_fast: Optional[float] = typer.Option(None, "--beta-fast", help="yarn only (transformers' default 32)."),
    beta_slow: Optional[float] = typer.Option(None, "--beta-slow", help="yarn only (transformers' default 1)."),
    attention_factor: Optional[float] = typer.Option(None, "--attention-factor", help="yarn only."),
) -> None:
    """Write a copy of MODEL whose config carries RoPE scaling (transformers' `rope_parameters`): plain
    transformers, vLLM and every Tempering command then load the scaled model from --out.

    The copy is recorded as an export of MODEL's run when a run wrote MODEL (lineage, eval cache keys)."""
    from tempering.config import ConfigError, RopeScaling, load_config
    from tempering.models.load import ModelNotFound, load_model, load_tokenizer, resolve_model
    from tempering.models.rope import RopeScalingError, context_window, scale_rope
    from tempering.runs.stage import record_export

    given = {"type": kind, "factor": factor, "original_max_position_embeddings": original}
    given |= {"beta_fast": beta_fast, "beta_slow": beta_slow, "attention_factor": attention_factor}
    try:
        scaling = load_config(RopeScaling, None, literal={k: v for k, v in given.items() if v is not None})
    except ConfigError as exc:
        fail(str(exc))
    if out_dir.exists() and any(out_dir.iterdir()):
        fail(f"--out {out_dir} exists and is not empty; choose an empty dir")
    try:
        source = resolve_model(spec)
        model = load_model(spec)
        scale_rope(model, scaling)
    except (ModelNotFound, RopeScalingError) as exc:
        fail(str(exc))
    with record_export(source, out_dir, {"model": spec, "rope_scaling": scaling.model_dump(exclude_none=True)}):
        model.save_pretrained(out_dir)
        load_tokenizer(spec).save_pretrained(out_dir)
    err.print(f"{scaling.type} x{scaling.factor:g}: window {context_window(model.config)} tokens, written to {out_dir}")
    print(json.dumps({"out": str(out_dir), "window": context_window(model.config), **scaling.model_dump()}))


def data_longctx(
    kind: str = typer.Argument(..., help="passkey, multikey, vartrack, crossfact or noisy."),
    out: Path = typer.Option(..., "--out", "-o", help="JSONL of SFT rows (messages: the haystack, then the answer)."),
    n: int = typer.Option(100, "--n", min=1, help="Rows per length."),
    lengths: List[int] = typer.Option([1024, 2048, 4096], "--length", help="Prompt length in tokens (repeatable)."),
    depths: List[float] = typer.Option(
        [0.0, 0.25, 0.5, 0.75, 1.0], "--depth", help="Needle depth in [0, 1] (repeatable)."
    ),
    distractors: int = typer.Option(3, "--distractors", help="Distractor facts beside the answer's."),
    seed: int = typer.Option(0, "--seed", help="The same seed writes the same rows."),
    split: str = typer.Option("train", "--split", help="train or heldout (disjoint filler, keys and names)."),
    model: str = typer.Option(DEFAULT_MODEL, "--model", help="Tokenizer and window (with RoPE scaling) of this model."),
) -> None:
    """Write long-context SFT rows: haystacks of KIND at each --length, the answer at each --depth.

    Train-split rows share no filler sentence, key or name with the heldout split the
    `longctx-<kind>` suites evaluate on."""
    from tempering.atomic import write_jsonl_atomic
    from tempering.config.longctx import longctx_settings
    from tempering.sources.longctx import longctx_sft_rows

    if split not in ("train", "heldout"):
        fail(f"--split {split!r}: expected train or heldout")
    settings = longctx_settings({"lengths": lengths, "depths": depths, "distractors": distractors, "model": model})
    rows = longctx_sft_rows([kind], n, seed, split, settings)
    count, sha = write_jsonl_atomic(out, rows, sidecar=True)
    err.print(f"{count} {kind} rows ({', '.join(map(str, lengths))} tokens) written to {out}")
    print(json.dumps({"out": str(out), "rows": count, "sha256": sha, "kind": kind, "lengths": lengths}))
