"""The vision SFT recipe: conversations with images -> the VLM's processor renders them -> Trainer.

One stage of the two-stage recipe (docs/vision.md): the config says which parts train in full
(`parts`) and whether the language model gets LoRA (`lora`). The data path is SFT's: rows load
and are checked by `data.io` (a bad image is quarantined as `file:line: reason`), render through
`data.vision_render` (token-exact assistant-only masks, image tokens never targets) and batch
through `data.batches.SFTBatches` (padded; images stacked per batch). The objective is SFT's.
"""

from __future__ import annotations

from typing import Any

from tempering.config import LoraSettings, VisionSFTConfig
from tempering.data.io import LoadResult, NoRows, RowError, load_rows, where
from tempering.data.render import RenderedExample, TemplateError
from tempering.recipes.recipe import Components, TrainingRecipe, held_out, run_training
from tempering.recipes.sft import SFTData, data_inputs, sft_files

LANGUAGE_LINEAR = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
"""LoRA's `all-linear` on a VLM: the language model's linear layers only."""


def render_vision_records(loaded: LoadResult, processor: Any, max_length: int) -> list[RenderedExample]:
    """Render validated conversations with the VLM's processor; over-long rows join `loaded.errors`."""
    from tempering.data.vision_render import render_vision_example

    out = []
    for rec in list(loaded.records):
        try:
            ex = render_vision_example(processor, rec.value.to_dicts())
        except TemplateError as exc:
            raise TemplateError(f"{where(rec.source, rec.location)}: {exc}") from None
        if len(ex.input_ids) > max_length:
            loaded.reject(rec, f"over max length: {len(ex.input_ids)} tokens > {max_length}", rec.value.model_dump())
            continue
        out.append(ex)
    return out


def prepare_vision_data(cfg: VisionSFTConfig, processor: Any) -> SFTData:
    """Load, check and render the training (and eval) conversations of one stage."""
    main = load_rows(cfg.data.train)
    train = render_vision_records(main, processor, cfg.data.max_length)
    if not train:
        first = f"; first: {main.errors[0]}" if main.errors else ""
        raise NoRows(
            f"{', '.join(cfg.data.train)}: no valid rows ({len(main.errors)} of {main.rows} quarantined{first})"
        )
    errors: list[RowError] = list(main.errors)
    summary: dict[str, Any] = {"rows": main.rows, "valid": len(main.records)}
    evals: list[RenderedExample] = []
    if cfg.data.eval:
        held = load_rows(cfg.data.eval)
        evals = render_vision_records(held, processor, cfg.data.max_length)
        errors += held.errors
        summary["eval_rows"] = len(evals)
    summary["quarantined"] = len(errors)
    return SFTData(train, evals, summary, errors)


def load_processor(spec: str) -> Any:
    from transformers import AutoProcessor

    from tempering.models.load import adapter_base, resolve_model

    local = resolve_model(spec)
    return AutoProcessor.from_pretrained(adapter_base(local) or local)


def vision_model(cfg: VisionSFTConfig) -> tuple[Any, dict[str, int]]:
    """The VLM of a stage with only `cfg.parts` (and LoRA adapters) trainable; the trainable counts."""
    return vlm_for_training(cfg.model, cfg.lora, set(cfg.parts))


def vlm_for_training(spec: str, lora: LoraSettings | None, parts: set[str]) -> tuple[Any, dict[str, int]]:
    """The VLM `spec` names with only `parts` (and LoRA adapters) trainable; the trainable counts.

    A new LoRA targets the language model only (`all-linear` means `LANGUAGE_LINEAR`) and saves
    `parts` in full with the adapter; an adapter directory continues its own adapter. GRPO passes
    no parts: only the LoRA weights train."""
    from tempering.models.lora import apply_lora
    from tempering.models.vlm import load_vlm, part_modules, trainable_parts

    model, _ = load_vlm(spec)
    if lora is not None and not hasattr(model, "peft_config"):
        if lora.target_modules == "all-linear":
            lora = lora.model_copy(update={"target_modules": LANGUAGE_LINEAR})
        model = apply_lora(model, lora, spec, modules_to_save=part_modules(model, parts) or None)
    return model, trainable_parts(model, parts)


def _components(cfg: VisionSFTConfig, data: SFTData, processor: Any, stage: Any) -> Components:
    from tempering.batches import embedding_rows
    from tempering.data.padding import pad_id
    from tempering.recipes.sft import sft_components
    from tempering.train.trainer import evaluate

    model, counts = vision_model(cfg)
    pad = pad_id(processor.tokenizer)
    batches, evals, objective = sft_components(cfg.train, cfg.data, data, pad, embedding_rows(model))
    check = held_out((lambda: evaluate(model, objective, evals, cfg.train.precision)) if evals else None)
    return Components(model, objective, batches, check, summary=lambda result: {"trainable_parameters": counts})


VISION_SFT = TrainingRecipe(
    "vision_sft",
    base_model=lambda cfg: cfg.model,
    inputs=lambda cfg: data_inputs(cfg.data),
    train_files=lambda cfg: sft_files(cfg.data),
    prepare=prepare_vision_data,
    components=_components,
    examples=lambda data: len(data.train),
    tokenizer=load_processor,
)
"""Supervised fine-tuning of chosen parts of a vision-language model on conversations with images."""


def run_vision_sft(cfg: VisionSFTConfig, force: bool = False) -> dict[str, Any]:
    """Run one vision SFT stage end to end and record it; returns the run summary."""
    return run_training(VISION_SFT, cfg, force)
