"""`temper distill CONFIG.yaml`: a student trained on a teacher's logits and generations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from tempering.cli_common import FORCE, NAME, OUT, STEPS, train_from_config


def distill(
    config: Path = typer.Argument(..., help="YAML config (see examples/distill_draft.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set loss.temperature=2 (repeatable)."),
    teacher: Optional[str] = typer.Option(None, help="Teacher model spec (alias, HF dir, .gguf, hub id)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    force: bool = FORCE,
) -> None:
    """Distil a teacher into a smaller student (forward KL + sequence-level CE), e.g. a speculative draft."""
    from tempering.config_distill import DistillConfig
    from tempering.recipes.distill import run_distill

    literal = {"teacher": teacher, "train.steps": steps, "out": out_dir, "name": name}
    print(json.dumps(train_from_config(DistillConfig, run_distill, config, set_, literal)))
