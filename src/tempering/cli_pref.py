"""`temper dpo CONFIG.yaml`: preference optimisation (DPO, IPO, SimPO) on preference pairs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console

from tempering.cli_common import FORCE, FULL, NAME, OUT, STEPS, train_from_config
from tempering.config import DPOConfig

stdout = Console(soft_wrap=True, highlight=False)


def dpo(
    config: Path = typer.Argument(..., help="YAML config (see examples/dpo.yaml)."),
    set_: List[str] = typer.Option([], "--set", help="Override any field: --set dpo.loss=ipo (repeatable)."),
    model: Optional[str] = typer.Option(None, help="Model spec (alias, HF dir, .gguf, run output, hub id)."),
    loss: Optional[str] = typer.Option(None, help="dpo | ipo | simpo (overrides dpo.loss)."),
    steps: Optional[int] = STEPS,
    out_dir: Optional[str] = OUT,
    name: Optional[str] = NAME,
    full: bool = FULL,
    force: bool = FORCE,
) -> None:
    """Preference optimisation on prompt/chosen/rejected pairs; the run summary JSON is the last line."""
    from tempering.recipes.dpo import run_dpo
    from tempering.train.distributed import world

    literal = {"model": model, "dpo.loss": loss, "train.steps": steps, "out": out_dir, "name": name}
    summary = train_from_config(DPOConfig, run_dpo, config, set_, literal, full, force)
    if world().main:  # under torchrun, rank 0 speaks for the run
        stdout.print(json.dumps(summary))
