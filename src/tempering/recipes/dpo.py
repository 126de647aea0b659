"""The preference recipe (DPO / IPO / SimPO): pairs -> rendered pairs -> reference -> Trainer -> run.

    load_pairs (quarantine) -> render_pairs (shared prompt, token-exact)
      -> reference sums (cached on disk; LoRA: adapters off)       [dpo, ipo]
      -> PairBatches + PreferenceObjective -> the one Trainer -> final model + summary

Held-out pairs (`data.eval`) are scored before and after: loss, reward accuracy (the
implicit reward of chosen above rejected) and margin, against the same reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from tempering.config import DPOConfig
from tempering.data.io import NoRows, RowError
from tempering.data.pair_render import RenderedPair
from tempering.errors import UserError
from tempering.recipes.recipe import Components, TrainingRecipe, held_out, run_training
from tempering.runs.stage import input_list
from tempering.train.metrics import console


@dataclass
class PairData:
    train: list[RenderedPair]
    eval: list[RenderedPair]
    summary: dict[str, Any]
    errors: list[RowError]


def prepare_pairs(cfg: DPOConfig, tokenizer: Any) -> PairData:
    """Load, validate and render the training (and held-out) pairs of one stage."""
    from tempering.data.pair_render import render_pairs
    from tempering.data.preference import load_pairs
    from tempering.data.render import detect_tool_call_style

    d = cfg.data
    style = detect_tool_call_style(tokenizer) if d.tool_call_style == "auto" else d.tool_call_style
    main = load_pairs(d.train)
    train = render_pairs(main, tokenizer, style, d.max_length)
    if not train:
        raise NoRows(
            f"{', '.join(d.train)}: no valid pairs ({len(main.errors)} of {main.rows} quarantined; "
            f"first: {main.errors[0]})"
        )
    errors = list(main.errors)
    summary: dict[str, Any] = {"rows": main.rows, "valid": len(train), "tool_call_style": style}
    held: list[RenderedPair] = []
    if d.eval:
        loaded = load_pairs(d.eval)
        held = render_pairs(loaded, tokenizer, style, d.max_length)
        errors += loaded.errors
        summary["eval_rows"] = len(held)
    summary["quarantined"] = len(errors)
    return PairData(train, held, summary, errors)


def pair_inputs(data: Any) -> list:
    """The recorded inputs of pair data settings (DPO, RM): training and held-out files."""
    return input_list([(p, "train") for p in data.train] + [(p, "eval") for p in data.eval])


def reference_for(
    cfg: DPOConfig, model: Any, tokenizer: Any, pairs: list[RenderedPair], precision: str
) -> tuple[torch.Tensor | None, dict[str, Any]]:
    """Cached reference sums for `pairs` (None when the loss needs none or it is computed online)."""
    from tempering.models.load import cache_dir
    from tempering.models.lora import continues_adapter
    from tempering.objectives.dpo import pair_sums
    from tempering.objectives.preference import needs_reference
    from tempering.train.reference import cached_reference_logps

    if not needs_reference(cfg.dpo.loss, cfg.dpo.plugins) or not pairs:
        return None, {"reference": "none"}
    if cfg.dpo.reference == "online":
        if cfg.lora is None:
            raise UserError(
                "dpo.reference: online needs LoRA (the base with adapters off is the reference); "
                "with full parameters use dpo.reference: cache"
            )
        if continues_adapter(model):
            raise UserError(
                f"dpo.reference: online compares with the base (adapters off), but {cfg.model} is an adapter "
                "that already changes the model: use dpo.reference: cache (the starting policy's log-probs)"
            )
        return None, {"reference": "online (adapters disabled)"}
    logps, record = cached_reference_logps(
        pair_sums, model, tokenizer, pairs, cfg.train.batch_size, precision, cache_dir(), console
    )
    return logps, {"reference": "cache", **record}


def dpo_components(
    cfg: DPOConfig, data: PairData, ref_train: torch.Tensor | None, ref_eval: torch.Tensor | None
) -> tuple[Any, list[dict[str, Any]], Any]:
    """(training batch source, held-out batches, objective); bench/throughput/dpo.py shares it."""
    from tempering.data.pair_batches import PairBatches, collate_pairs
    from tempering.objectives.dpo import PreferenceObjective
    from tempering.train.distributed import world

    w = world()  # under torchrun each rank takes its stride of every global micro-batch
    batches = PairBatches(data.train, cfg.train.batch_size, cfg.train.seed, ref_train, shard=(w.rank, w.size))
    size, evals = cfg.train.batch_size, []
    for start in range(0, len(data.eval), size):
        batch = collate_pairs(data.eval[start : start + size])
        if ref_eval is not None:
            batch["ref_logps"] = ref_eval[start : start + size]
        evals.append(batch)
    return batches, evals, PreferenceObjective(cfg.dpo)


@torch.no_grad()
def evaluate_pairs(model: Any, objective: Any, batches: list[dict[str, Any]], precision: str) -> dict[str, float]:
    """Held-out loss (weighted mean per pair), reward accuracy and margin (means over pairs)."""
    from tempering.models.precision import autocast

    was = model.training
    model.eval()
    device = next(model.parameters()).device
    total = {"loss": 0.0, "reward_accuracy": 0.0, "reward_margin": 0.0}
    pairs = 0
    try:
        for batch in batches:
            batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            with autocast(precision, device):
                loss_sum, stats = objective.loss(model, batch)
            n = objective.units(batch)
            total["loss"] += float(loss_sum)
            total["reward_accuracy"] += float(stats["reward_accuracy"]) * n
            total["reward_margin"] += float(stats["reward_margin"]) * n
            pairs += n
    finally:
        model.train(was)
    return {k: v / max(pairs, 1) for k, v in total.items()}


def _components(cfg: DPOConfig, data: PairData, tokenizer: Any, stage: Any) -> Components:
    from tempering.models.lora import load_for_training
    from tempering.models.precision import resolve_precision

    torch.manual_seed(cfg.train.seed)  # LoRA initialisation
    model = load_for_training(cfg.model, cfg.lora, cfg.rope_scaling)
    precision = resolve_precision(cfg.train.precision)
    ref_train, ref_info = reference_for(cfg, model, tokenizer, data.train, precision)
    ref_eval, _ = reference_for(cfg, model, tokenizer, data.eval, precision)
    batches, evals, objective = dpo_components(cfg, data, ref_train, ref_eval)
    check = held_out((lambda: evaluate_pairs(model, objective, evals, precision)) if evals else None)
    return Components(model, objective, batches, check, summary=lambda result: _summary(cfg, ref_info, result))


def _summary(cfg: DPOConfig, ref_info: dict[str, Any], result: Any) -> dict[str, Any]:
    last = result.history[-1] if result.history else {}
    pairs = result.steps * cfg.train.batch_size * cfg.train.grad_accum
    return {
        "loss": cfg.dpo.loss,
        **ref_info,
        "train_reward_accuracy_last": last.get("reward_accuracy"),
        "pairs_per_s": pairs / result.seconds if result.seconds else None,
    }


DPO = TrainingRecipe(
    "dpo",
    base_model=lambda cfg: cfg.model,
    inputs=lambda cfg: pair_inputs(cfg.data),
    train_files=lambda cfg: cfg.data.train,
    prepare=prepare_pairs,
    components=_components,
    before_key="eval_before",
    after_key="eval_after",
    quarantine_kind="pairs",
    examples=lambda data: len(data.train),
)
"""Preference optimisation (DPO / IPO / SimPO) on rendered pairs against a reference."""


def run_dpo(cfg: DPOConfig, force: bool = False) -> dict[str, Any]:
    """Run one preference stage end to end and record it (`run_training`); returns the run summary."""
    return run_training(DPO, cfg, force)
