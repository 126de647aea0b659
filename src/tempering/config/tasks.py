"""Where tasks come from: a registered task source or task JSONL files (GRPO, domains, suites, pairs)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, model_validator

from tempering.config.base import Strict

# The shape of a task source name (`sources.registry` refuses any other): a word, then optionally
# ":" and an argument. Such values are never paths, so the loader keeps them as given.
SOURCE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(:.*)?")


class TaskSourceSettings(Strict):
    """Where tasks come from: a registered source (a generator, a benchmark) or task JSONL files."""

    path_fields = ("source",)

    source: str = "builtin:arithmetic"
    """A registered source (`builtin:arithmetic`, `humaneval`, `reasoning_gym:<dataset>`, ...:
    `tempering.sources.registry`) or a path to task JSONL."""
    n: int = Field(1000, ge=1)
    """Tasks to generate (generators) or the most to read (files)."""
    seed: int = 0
    """Seed of the built-in generators (the same seed gives the same tasks)."""
    ops: str = "+-*"
    """builtin:arithmetic only: which operations."""
    split: Literal["train", "heldout"] = "train"
    """builtin generators: which disjoint split."""
    split_by: Literal["parity", "hash"] = "parity"
    """builtin:arithmetic only: parity (even/odd operand sum; biases last digits) or hash (unbiased)."""
    phrasing: Literal["canonical", "varied", "reworded"] = "canonical"
    """builtin:arithmetic only: one template, varied training wordings, or held-out rewordings."""
    verifier: dict[str, Any] = {}
    """builtin:arithmetic only: fields merged over the tasks' verifier spec, e.g. {type: exact}."""
    env_args: dict[str, Any] = {}
    """verifiers:<env_id> only: keyword arguments of the environment's `load_environment`."""
    config: dict[str, Any] = {}
    """Sources that read one (`reasoning_gym:<dataset>`, `longctx:<kind>`): the generator's settings,
    e.g. {max_terms: 3} or the haystack settings (`config.LongctxSettings`); any other source refuses it."""
    image_size: int | None = Field(None, ge=16, le=1024)
    """vision:<name> only: the side of the drawn pictures in pixels (None: 64); match the size the
    model was trained on (the processor resizes any other)."""

    @model_validator(mode="after")
    def _env_args_fit_source(self) -> TaskSourceSettings:
        if self.env_args and not self.source.startswith("verifiers:"):
            raise ValueError(f"'env_args' applies to verifiers:<env_id> sources only, not {self.source!r}")
        if self.image_size is not None and not self.source.startswith("vision:"):
            raise ValueError(f"'image_size' applies to vision:<name> sources only, not {self.source!r}")
        return self

    @classmethod
    def names_no_file(cls, field: str, value: str) -> bool:
        return SOURCE_NAME.fullmatch(value) is not None
