"""Where tasks come from: a registered task source or task JSONL files (GRPO, domains, suites, pairs)."""

from __future__ import annotations

import importlib
import re
from typing import Any, Iterable, Literal

from pydantic import Field

from tempering.config.base import Options, WithOptions

# The shape of a task source name (`sources.registry` refuses any other): a word, then optionally
# ":" and an argument. Such values are never paths, so the loader keeps them as given.
SOURCE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(:.*)?")


SOURCE_SETTINGS: dict[str, type[Options]] = {}
"""The settings class of every registered task source, by its name (a prefix ends in ":"); filled
by `sources.registry.register_source`, which registers the loader beside it."""


def match_source(value: str, names: Iterable[str]) -> str | None:
    """The registered name `value` is (`humaneval`) or begins with (`reasoning_gym:` for
    `reasoning_gym:chain_sum`), else None (then `value` is a file path)."""
    names = set(names)
    if value in names and not value.endswith(":"):
        return value
    prefix, colon, _ = value.partition(":")
    return f"{prefix}:" if colon and f"{prefix}:" in names else None


def source_settings(value: str) -> type[Options]:
    """The settings class of the source `value` names (the base `Options`, no settings, for a file).

    The built-in sources register when `tempering.sources` is imported (no torch; imported here by
    name, as `algorithms` imports the built-in losses); a plug-in's registers when its module is."""
    importlib.import_module("tempering.sources")
    name = match_source(value, SOURCE_SETTINGS)
    return Options if name is None else SOURCE_SETTINGS[name]


class TaskSourceSettings(WithOptions):
    """Where tasks come from: a registered source (a generator, a benchmark) or task JSONL files.
    The source's own settings (`ops` of builtin:arithmetic, `config` of reasoning_gym:...) are
    written beside these and validated by the source's settings class (`source_settings`)."""

    path_fields = ("source",)

    source: str = "builtin:arithmetic"
    """A registered source (`builtin:arithmetic`, `humaneval`, `reasoning_gym:<dataset>`, ...:
    `tempering.sources.registry`) or a path to task JSONL."""
    n: int = Field(default=1000, ge=1)
    """Tasks to generate (generators) or the most to read (files)."""
    seed: int = 0
    """Seed of the generators (the same seed gives the same tasks)."""
    split: Literal["train", "heldout"] = "train"
    """Generators and benchmarks with splits: which disjoint split."""

    @classmethod
    def options_class(cls, data: dict[str, Any]) -> tuple[type[Options], str]:
        source = data.get("source", cls.model_fields["source"].default)
        if not isinstance(source, str):
            return Options, "a task source"
        model = source_settings(source)
        return model, f"task source {source!r}" if match_source(source, SOURCE_SETTINGS) else f"task file {source!r}"

    @classmethod
    def names_no_file(cls, field: str, value: str) -> bool:
        return SOURCE_NAME.fullmatch(value) is not None
