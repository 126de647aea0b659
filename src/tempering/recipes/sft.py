"""The SFT recipe: validated data -> rendered examples -> Trainer -> recorded run.

Components (render, batches, objective, Trainer, registry) do the work; this file only
fills in the steps of the one training sequence (`recipes.recipe`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tempering.config import DataSettings, SFTConfig, TrainSettings
from tempering.data.io import LoadResult, NoRows, RowError, load_rows
from tempering.data.render import RenderedExample, detect_tool_call_style, render_records
from tempering.data.text_rows import check_text_row, render_text_records
from tempering.errors import UserError
from tempering.recipes.recipe import Components, TrainingRecipe, held_out, run_training
from tempering.runs.stage import input_list

if TYPE_CHECKING:
    from tempering.batches import SFTBatch
    from tempering.data.batches import SFTBatches
    from tempering.objectives.sft import SFTObjective


@dataclass
class SFTData:
    train: list[RenderedExample]
    eval: list[RenderedExample]
    summary: dict[str, Any]
    errors: list[RowError]


def prepare_sft_data(cfg: DataSettings, tokenizer: Any, seed: int) -> SFTData:
    """Load, validate, render and mix the training (and eval) data of one stage."""
    if cfg.format == "text":

        def load(paths: list[str]) -> tuple[LoadResult, list[RenderedExample]]:
            loaded = load_rows(paths, check_text_row)
            return loaded, render_text_records(loaded, tokenizer, cfg.max_length)
    else:
        style = detect_tool_call_style(tokenizer) if cfg.tool_call_style == "auto" else cfg.tool_call_style

        def load(paths: list[str]) -> tuple[LoadResult, list[RenderedExample]]:
            loaded = load_rows(paths)
            return loaded, render_records(loaded, tokenizer, style, cfg.max_length)

    main, train = load(cfg.train)
    if not train:  # refuse here, naming the files: an empty example list cannot be batched
        raise NoRows(
            f"{', '.join(cfg.train)}: no valid rows ({len(main.errors)} of {main.rows} "
            f"quarantined; first: {main.errors[0]})"
        )
    errors = list(main.errors)
    kind = {"format": "text", "pieces": len(train)} if cfg.format == "text" else {"tool_call_style": style}
    summary: dict[str, Any] = {"rows": main.rows, "valid": len(main.records), **kind}
    if cfg.replay:
        general, pool = load(cfg.replay.data)
        errors += general.errors
        # ratio r of the final mix is replay: k / (n + k) = r
        k = round(len(train) * cfg.replay.ratio / (1 - cfg.replay.ratio))
        if k and not pool:
            raise UserError(f"replay files {cfg.replay.data} have no valid rows ({len(general.errors)} quarantined)")
        rng = random.Random(seed)
        picked = rng.sample(pool, k) if k <= len(pool) else [rng.choice(pool) for _ in range(k)]
        train += picked
        summary.update(replay_rows=general.rows, replay_used=k)
    evals: list[RenderedExample] = []
    if cfg.eval:
        held, evals = load(cfg.eval)
        errors += held.errors
        summary["eval_rows"] = len(evals)
    summary["quarantined"] = len(errors)
    return SFTData(train, evals, summary, errors)


def data_inputs(data: Any) -> list:
    """The recorded inputs of SFT-style data settings (SFT, distillation), with their roles."""
    replay = data.replay.data if data.replay else []
    return input_list(
        [(p, "train") for p in data.train] + [(p, "replay") for p in replay] + [(p, "eval") for p in data.eval]
    )


def sft_files(data: Any) -> list[str]:
    """The files an SFT-style stage trains on (its training files and replay): the leakage guard reads them."""
    return data.train + (data.replay.data if data.replay else [])


def _components(cfg: SFTConfig, data: SFTData, tokenizer: Any, stage: Any) -> Components:
    from tempering.batches import embedding_rows
    from tempering.data.padding import pad_id
    from tempering.models.lora import load_for_training
    from tempering.train.trainer import evaluate

    model = load_for_training(cfg.model, cfg.lora, cfg.rope_scaling)
    batches, evals, objective = sft_components(cfg.train, cfg.data, data, pad_id(tokenizer), embedding_rows(model))
    if cfg.train.context_parallel > 1:  # every rank reads the whole batch and keeps its share of each row
        from tempering.train.context_parallel import split_sequences

        batches = split_sequences(model, batches, cfg.train.context_parallel)
    check = held_out((lambda: evaluate(model, objective, evals, cfg.train.precision)) if evals else None)
    return Components(model, objective, batches, check, summary=tokens_per_s)


def tokens_per_s(result: Any) -> dict[str, Any]:
    """The fit's real (unpadded) tokens per second."""
    return {"real_tokens_per_s": result.real_tokens / result.seconds if result.seconds else None}


SFT = TrainingRecipe(
    "sft",
    base_model=lambda cfg: cfg.model,
    inputs=lambda cfg: data_inputs(cfg.data),
    train_files=lambda cfg: sft_files(cfg.data),
    prepare=lambda cfg, tokenizer: prepare_sft_data(cfg.data, tokenizer, cfg.train.seed),
    components=_components,
    examples=lambda data: len(data.train),
    context_parallel=True,
)
"""Supervised fine-tuning: rendered conversations, assistant-only cross-entropy."""


def run_sft(cfg: SFTConfig, force: bool = False) -> dict[str, Any]:
    """Run one SFT stage end to end and record it (`run_training`); returns the run summary.

    `force`: resume even though the config differs from the one the run started with.
    """
    return run_training(SFT, cfg, force)


def sft_components(
    train: TrainSettings, settings: DataSettings, data: SFTData, pad: int, vocab: int | None
) -> tuple[SFTBatches, list[SFTBatch], SFTObjective]:
    """(training batch source, eval batches, objective) of an SFT-style stage (its `train` and `data`
    settings); bench/throughput/sft.py shares it.

    Raises:
        TokenIdOutOfRange: an example renders to a token id outside the model's embedding
            (`vocab` rows: a tokenizer with tokens the model has no row for), naming its file and line.
    """
    from tempering.batches import check_token_ids
    from tempering.data.batches import SFTBatches, pack_batch, pad_batch
    from tempering.objectives.sft import SFTObjective
    from tempering.train.distributed import world

    for ex in [*data.train, *data.eval]:  # before any step: one line naming the row, not a step's batch
        check_token_ids(ex.input_ids, vocab, ex.where or "a rendered example")
    w = world()  # under torchrun each rank takes its stride of every global micro-batch
    # (with context parallelism each takes every conversation, and its share of each row)
    shard = (w.rank, w.size) if train.context_parallel == 1 else (0, 1)
    batches = SFTBatches(
        data.train, train.batch_size, settings.max_length, pad, settings.packing, train.seed, shard=shard
    )
    size = train.batch_size
    chunks = [data.eval[i : i + size] for i in range(0, len(data.eval), size)]
    evals = [pack_batch(c, settings.max_length, pad) if settings.packing else pad_batch(c, pad) for c in chunks]
    return batches, evals, SFTObjective()
