"""reasoning-gym procedural datasets as `Task`s, each scored by its dataset's own `score_answer`.

    tasks = reasoning_gym_tasks("chain_sum", size=200, seed=0, **EVAL_PRESETS["chain_sum"])

The verifier spec carries everything scoring needs, so a task scores the same in any process:

    {"type": "reasoning_gym", "dataset": "chain_sum", "seed": 0, "size": 200, "index": 7,
     "config": {...}, "entry": {"answer": "...", "metadata": {...}}, "version": "0.1.25"}

Why the entry is stored rather than regenerated from (seed, index): regeneration would tie
scoring to the installed reasoning-gym version and to any process-dependent randomness in a
generator. The dataset object itself is still rebuilt from (name, seed, size, config), because
some `score_answer` methods read their config. Every entry is checked when the task is made:
the oracle answer must score the same on the JSON round-tripped entry as on the original
(`arc_agi` and `rearc` fail this, their grids being tuples, and are refused).

The question is the prompt (plus an answer-format instruction); the answer and metadata live
only in the verifier spec.

Seeds are not independent draws: reasoning-gym seeds entry i from `seed + i`, so seed 1's entries
are seed 0's shifted by one. Training tasks for a suite built on seed 0 take a far seed (and a
decontamination pass: short problems also collide by chance).

reasoning-gym is imported lazily: importing it registers ~100 generators and takes seconds.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib.metadata import version
from typing import Any

from tempering.config import Options, TaskSourceSettings
from tempering.errors import UserError
from tempering.sources.registry import register_source
from tempering.types import Task

# reasoning-gym's own convention (its system prompts ask for the same tags).
ANSWER_INSTRUCTION = "\n\nGive only your final answer between <answer> and </answer> tags."

# Two small, fast generators a 135M model can score above zero on: short +/- chains and
# spelling short words backward (partial credit per matching leading letter).
EVAL_PRESETS: dict[str, dict[str, Any]] = {
    "chain_sum": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2},
    "spell_backward": {"min_word_len": 3, "max_word_len": 5},
}


def reasoning_gym_tasks(
    name: str, size: int, seed: int, *, instruction: str | None = ANSWER_INSTRUCTION, **config: Any
) -> list[Task]:
    """`size` tasks from the reasoning-gym dataset `name`, deterministic in `seed`.

    Args:
        name: a registered reasoning-gym dataset, e.g. "chain_sum".
        size: number of tasks (entries 0..size-1).
        seed: the dataset seed; the same (name, size, seed, config) gives the same tasks.
        instruction: appended to each question; None leaves the question as it is.
        **config: fields of the dataset's config dataclass (e.g. `max_terms=3`).

    Raises:
        ValueError: unknown dataset, bad config, or entries that do not survive JSON.
    """
    if size < 1:
        raise UserError(f"size must be >= 1, got {size}")
    try:
        json.dumps(config)
    except TypeError as exc:
        raise UserError(f"reasoning-gym config for {name!r} must be JSON-serialisable: {exc}") from None
    dataset = build_dataset(name, seed, size, json.dumps(config, sort_keys=True))
    rg_version = version("reasoning-gym")
    tasks = []
    for index in range(size):
        entry = dataset[index]
        stored = _stored_entry(name, dataset, entry)
        spec = {
            "type": "reasoning_gym",
            "dataset": name,
            "seed": seed,
            "size": size,
            "index": index,
            "config": config,
            "entry": stored,
            "version": rg_version,
        }
        tasks.append(
            Task(
                id=f"rg-{name}-{seed}-{index:05d}",
                prompt=entry["question"] + (instruction or ""),
                verifier=spec,
                track="reasoning",
                source=f"reasoning_gym:{name}",
            )
        )
    return tasks


class ReasoningGymSettings(Options):
    """reasoning_gym:<dataset>'s own settings."""

    config: dict[str, Any] = {}
    """The dataset's generator settings, e.g. {max_terms: 3} (reasoning-gym checks them)."""


@register_source("reasoning_gym:", ReasoningGymSettings)
def _reasoning_gym_source(s: TaskSourceSettings, arg: str) -> list[Task]:
    return reasoning_gym_tasks(arg, size=s.n, seed=s.seed, **s.options_as(ReasoningGymSettings).config)


@lru_cache(maxsize=64)
def build_dataset(name: str, seed: int, size: int, config_json: str) -> Any:
    """The reasoning-gym dataset object (cached; `config_json` is the config as sorted JSON)."""
    import reasoning_gym

    config = json.loads(config_json)
    try:
        return reasoning_gym.create_dataset(name, seed=seed, size=size, **config)
    except (TypeError, AssertionError) as exc:  # unknown config field / failed config.validate()
        raise UserError(f"bad reasoning-gym config for {name!r} {config}: {exc or type(exc).__name__}") from None


def _stored_entry(name: str, dataset: Any, entry: dict[str, Any]) -> dict[str, Any]:
    """The entry's answer and metadata as JSON, checked to score the oracle answer unchanged."""
    try:
        stored = json.loads(json.dumps({"answer": entry["answer"], "metadata": entry["metadata"]}))
    except TypeError as exc:
        raise UserError(f"reasoning-gym dataset {name!r}: entries are not JSON-serialisable ({exc})") from None
    if entry["answer"] is not None:
        original = dataset.score_answer(entry["answer"], entry)
        roundtrip = dataset.score_answer(entry["answer"], stored)
        if original != roundtrip:
            raise UserError(
                f"reasoning-gym dataset {name!r}: the oracle answer scores {original} on the entry "
                f"but {roundtrip} after a JSON round trip; this dataset is not supported"
            )
    return stored
