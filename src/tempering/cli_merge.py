"""`temper merge CONFIG.yaml`: merge LoRA adapters (PEFT) or full models (mergekit) into one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from tempering.cli_common import fail


def merge(
    config: Path = typer.Argument(..., help="YAML config (inputs, weights, method; see docs/merge.md)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set method=ties (repeatable)."),
    out_dir: Optional[str] = typer.Option(None, "--out", help="Run root."),
    name: Optional[str] = typer.Option(None, help="Run name."),
    merged_model: bool = typer.Option(False, "--merged-model", help="Adapters: also write a standalone merged model."),
) -> None:
    """Merge trained tracks: LoRA adapters with PEFT (linear, cat, svd, ties, dare), full models with
    mergekit; checks the tokenizer round trip and records the merge (last line: JSON summary)."""
    from tempering.config import ConfigError, MergeConfig, load_config

    literal = {k: v for k, v in (("out", out_dir), ("name", name)) if v is not None}
    if merged_model:
        literal["merged_model"] = True
    try:
        cfg = load_config(MergeConfig, config, list(set_), literal)
    except (ConfigError, FileNotFoundError) as exc:
        fail(str(exc))
    from tempering.recipes.merge import run_merge

    try:
        summary = run_merge(cfg)
    except (ValueError, FileNotFoundError) as exc:  # MergeError, StageError, bad model spec
        fail(f"{config}: {exc}")
    print(json.dumps(summary))
