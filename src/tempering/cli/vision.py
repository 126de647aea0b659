"""`temper vision ...`: assemble a vision-language model here, and write the synthetic visual tasks.

Each ends with one JSON line on stdout; bad input is a one-line error and a non-zero exit."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from tempering.cli.common import err, fail
from tempering.config import DEFAULT_MODEL

vision_app = typer.Typer(
    help="Vision-language models: assemble one from transformers classes, write synthetic visual tasks.",
    no_args_is_help=True,
)


@vision_app.command("assemble")
def vision_assemble(
    out: Path = typer.Option(..., "--out", "-o", help="The model directory to write (model + processor)."),
    language_model: str = typer.Option(DEFAULT_MODEL, "--lm", help="The language model whose weights are copied in."),
    image_size: int = typer.Option(64, help="Image side in pixels the processor resizes to."),
    patch_size: int = typer.Option(8, help="ViT patch side: (image_size / patch_size)^2 image tokens per image."),
    hidden_size: int = typer.Option(192, help="Vision encoder width."),
    layers: int = typer.Option(4, help="Vision encoder layers."),
    seed: int = typer.Option(0, help="Seed of the vision encoder's and projector's random weights."),
    lm_layers: int = typer.Option(0, help="Keep only the language model's first N decoder layers (0: all)."),
) -> None:
    """Build a LLaVA-shaped VLM: a new SigLIP encoder + projector over a language model's weights."""
    from tempering.models.load import load_model, load_tokenizer
    from tempering.models.vlm import VisionTower, assemble_vlm, keep_first_layers, save_vlm

    if image_size % patch_size:
        fail(f"--image-size {image_size} is not a multiple of --patch-size {patch_size}")
    lm, tokenizer = load_model(language_model), load_tokenizer(language_model)
    if lm_layers:
        lm = keep_first_layers(lm, lm_layers)
    tower = VisionTower(image_size=image_size, patch_size=patch_size, hidden_size=hidden_size, layers=layers)
    model, processor = assemble_vlm(lm, tokenizer, tower, seed=seed)
    path = save_vlm(model, processor, out)
    n = sum(p.numel() for p in model.parameters())
    err.print(
        f"[green]assembled[/green] {path}: {n / 1e6:.1f}M parameters, {tower.image_tokens} image tokens per image"
    )
    print(json.dumps({"model": str(path), "parameters": n, "image_tokens": tower.image_tokens}))


@vision_app.command("tasks")
def vision_tasks_cmd(
    name: str = typer.Argument(..., help="colour_shape, count, read, bar_chart or ui_button."),
    out: Path = typer.Option(..., "--out", "-o", help="JSONL to write."),
    n: int = typer.Option(200, min=1, help="How many tasks."),
    seed: int = typer.Option(0, help="Seed of the split's stream."),
    split: str = typer.Option("train", help="train or heldout (disjoint by seed and by layout)."),
    size: int = typer.Option(64, help="Image side in pixels."),
    sft: bool = typer.Option(False, help="Write SFT conversations (prompt + the answer) instead of task rows."),
) -> None:
    """Write seeded synthetic visual tasks (images as PNG data URLs) as task rows or SFT conversations."""
    from tempering.atomic import write_jsonl_atomic
    from tempering.data.vision_tasks import sft_rows, vision_tasks

    if split not in ("train", "heldout"):
        fail(f"--split must be train or heldout, got {split!r}")
    tasks = vision_tasks(name, n, seed, split, size)
    rows = sft_rows(tasks) if sft else [t.model_dump(exclude_none=True) for t in tasks]
    write_jsonl_atomic(out, rows, sidecar=False)
    err.print(f"[green]wrote[/green] {len(rows)} {name} {split} {'conversations' if sft else 'tasks'} -> {out}")
    print(json.dumps({"out": str(out), "rows": len(rows), "task": name, "split": split}))
