"""`temper sft CONFIG --dry-run`: the SFT recipe's data steps, previewed, nothing trained.

Only the tokenizer is loaded (never the weights), and no run directory or registry row is
created. What a real run would refuse (no rows, a template problem, data overlapping a
private eval suite) fails the dry run the same way.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console

from tempering.config import SFTConfig
from tempering.data.preview import preview_sft, render_preview
from tempering.recipes.recipe import check_leakage
from tempering.recipes.sft import SFT, prepare_sft_data


def dry_run_sft(cfg: SFTConfig, console: Console, tokenizer: Any = None) -> dict[str, Any]:
    """Print the preview of one SFT config; returns its counts (the command's closing JSON)."""
    check_leakage(SFT, cfg)  # the same guard as the run
    if tokenizer is None:
        from tempering.models.load import load_tokenizer

        tokenizer = load_tokenizer(cfg.model)
    preview = preview_sft(cfg, prepare_sft_data(cfg.data, tokenizer, cfg.train.seed), tokenizer)
    render_preview(preview, console)
    return {
        "dry_run": True,
        **{k: preview["data"][k] for k in ("rows", "valid", "quarantined")},
        "tokens": preview["tokens"],
    }
