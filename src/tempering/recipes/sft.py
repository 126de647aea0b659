"""The SFT recipe: validated data -> rendered examples -> Trainer -> recorded run.

Components (render, batches, objective, Trainer, registry) do the work; this file only
wires them in order, so a reader sees the whole job top to bottom.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tempering.config import DataSettings, SFTConfig
from tempering.data.io import NoRows, RowError, load_rows, write_quarantine
from tempering.data.render import RenderedExample, detect_tool_call_style, render_records
from tempering.train.metrics import console


@dataclass
class SFTData:
    train: list[RenderedExample]
    eval: list[RenderedExample]
    summary: dict[str, Any]
    errors: list[RowError]


def prepare_sft_data(cfg: DataSettings, tokenizer: Any, seed: int) -> SFTData:
    """Load, validate, render and mix the training (and eval) data of one stage."""
    style = detect_tool_call_style(tokenizer) if cfg.tool_call_style == "auto" else cfg.tool_call_style
    main = load_rows(cfg.train)
    train = render_records(main, tokenizer, style, cfg.max_length)
    if not train:  # refuse here, naming the files: an empty example list cannot be batched
        raise NoRows(f"{', '.join(cfg.train)}: no valid rows ({len(main.errors)} of {main.rows} "
                     f"quarantined; first: {main.errors[0]})")
    errors = list(main.errors)
    summary: dict[str, Any] = {"rows": main.rows, "valid": len(train), "tool_call_style": style}
    if cfg.replay:
        general = load_rows(cfg.replay.data)
        pool = render_records(general, tokenizer, style, cfg.max_length)
        errors += general.errors
        # ratio r of the final mix is replay: k / (n + k) = r
        k = round(len(train) * cfg.replay.ratio / (1 - cfg.replay.ratio))
        if k and not pool:
            raise ValueError(f"replay files {cfg.replay.data} have no valid rows ({len(general.errors)} quarantined)")
        rng = random.Random(seed)
        picked = rng.sample(pool, k) if k <= len(pool) else [rng.choice(pool) for _ in range(k)]
        train += picked
        summary.update(replay_rows=general.rows, replay_used=k)
    evals: list[RenderedExample] = []
    if cfg.eval:
        held = load_rows(cfg.eval)
        evals = render_records(held, tokenizer, style, cfg.max_length)
        errors += held.errors
        summary["eval_rows"] = len(evals)
    summary["quarantined"] = len(errors)
    return SFTData(train, evals, summary, errors)


def load_base_for_training(cfg: SFTConfig) -> Any:
    """The model to train: LoRA on top of the base, or all parameters.

    Starting from a PEFT adapter dir: with LoRA, training continues that adapter (its own
    rank and targets); with full parameters, the adapter is merged in first.
    """
    from tempering.models.load import adapter_base, load_model, resolve_model
    from tempering.models.lora import apply_lora

    if adapter_base(resolve_model(cfg.model)):
        model = load_model(cfg.model, trainable_adapter=cfg.lora is not None)
        if cfg.lora is None:
            model = model.merge_and_unload()
            model.requires_grad_(True)
        else:
            console.print("[dim]continuing the given LoRA adapter (its own r/alpha/targets apply)[/dim]")
        return model
    model = load_model(cfg.model)
    return apply_lora(model, cfg.lora, cfg.model) if cfg.lora else model


def run_sft(cfg: SFTConfig) -> dict[str, Any]:
    """Run one SFT stage end to end and record it; returns the run summary."""
    import torch

    from tempering.data.batches import SFTBatches, pack_batch, pad_batch
    from tempering.evals.leakage import check_private_overlap
    from tempering.models.load import load_tokenizer
    from tempering.objectives.sft import SFTObjective
    from tempering.pipeline.registry import Registry
    from tempering.train.trainer import Trainer, evaluate

    # refused before anything is recorded: private eval tasks must never be trained on
    check_private_overlap(cfg.data.train + (cfg.data.replay.data if cfg.data.replay else []))
    name = cfg.name or time.strftime("sft-%Y%m%d-%H%M%S")
    run_dir = Path(cfg.out) / name
    registry = Registry(Path(cfg.out) / "registry.sqlite")
    inputs = cfg.data.train + cfg.data.eval + (cfg.data.replay.data if cfg.data.replay else [])
    run_id = registry.start(name, "sft", cfg.model_dump(), inputs, cfg.model)
    try:
        torch.manual_seed(cfg.train.seed)
        tokenizer = load_tokenizer(cfg.model)
        data = prepare_sft_data(cfg.data, tokenizer, cfg.train.seed)
        if data.errors:
            qpath = write_quarantine(data.errors, run_dir / "quarantine.jsonl")
            console.print(f"[yellow]{len(data.errors)} bad rows quarantined -> {qpath}[/yellow]")
            for err in data.errors[:5]:
                console.print(f"  [yellow]{err}[/yellow]")
        model = load_base_for_training(cfg)
        pad = tokenizer.pad_token_id
        batches = SFTBatches(data.train, cfg.train.batch_size, cfg.data.max_length, pad, cfg.data.packing, cfg.train.seed)
        chunks = [data.eval[i : i + cfg.train.batch_size] for i in range(0, len(data.eval), cfg.train.batch_size)]
        eval_batches = [pack_batch(c, cfg.data.max_length, pad) if cfg.data.packing else pad_batch(c, pad) for c in chunks]
        objective = SFTObjective()
        before = evaluate(model, objective, eval_batches, cfg.train.precision) if eval_batches else None
        result = Trainer(model, objective, batches, cfg.train, run_dir).fit()
        after = evaluate(model, objective, eval_batches, cfg.train.precision) if eval_batches else None
        final = run_dir / "final"
        model.save_pretrained(final, **({"save_embedding_layers": False} if cfg.lora else {}))
        tokenizer.save_pretrained(final)
        summary = {
            "run_id": run_id, "run_dir": str(run_dir), "final": str(final), "data": data.summary,
            "steps": result.steps, "resumed_from": result.resumed_from, "guard": result.counts,
            "train_loss_first": result.losses[0] if result.losses else None,
            "train_loss_last": result.losses[-1] if result.losses else None,
            "eval_loss_before": before, "eval_loss_after": after,
            "real_tokens_per_s": result.real_tokens / result.seconds if result.seconds else None,
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        registry.finish(run_id, {"final": str(final), "metrics": str(run_dir / "metrics.jsonl")}, summary)
        return summary
    except BaseException as exc:
        registry.fail(run_id, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        registry.close()
