"""Bench training runs go through the product: the recipe a `temper sft|dpo|grpo|agent` command
runs (`recipes.recipe.run_training`), on the same pydantic config the command loads, with the
bench's own Trainer callbacks (a step clock, a budget) added to the recipe's components.

    summary, seen = run_recipe(SFT, cfg, [timer])   # seen["parts"]: the model, objective, batches

A callback that raises `Stop` ends the run after that step (a time budget the bench keeps off
the framework's clock); `run_recipe` then returns None as the summary, the stage left unfinished.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence


class Stop(Exception):
    """Raised by a bench callback to end the run after the current step."""


def run_recipe(
    recipe: Any, cfg: Any, callbacks: Sequence[Callable[[int, dict], None]] = (), seen: dict[str, Any] | None = None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Run `cfg` through `recipe` as its command does, `callbacks` added after the recipe's own.

    Returns (the run summary, or None when a callback raised `Stop`; {"data": the prepared data,
    "parts": the recipe's `Components`, "components_s": the seconds building them took (model
    load, a DPO reference pass), "ready": the clock when they were built}). `seen`: the dict to
    fill, for callbacks that read the parts (the model) while the run goes on."""
    import time

    from tempering.recipes.recipe import run_training

    seen = {} if seen is None else seen

    def components(cfg: Any, data: Any, tokenizer: Any, stage: Any) -> Any:
        t0 = time.perf_counter()
        parts = recipe.components(cfg, data, tokenizer, stage)
        parts.callbacks.extend(callbacks)
        ready = time.perf_counter()
        seen.update(data=data, parts=parts, components_s=ready - t0, ready=ready)
        return parts

    try:
        return run_training(replace(recipe, components=components), cfg), seen
    except Stop:
        return None, seen


def write_jsonl(path: Path, rows: Sequence[dict]) -> str:
    """`rows` as a JSONL file (the data file a config names); returns its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)
