"""The base of every config: strict models (unknown keys are errors), path lists, the default model."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from tempering.errors import UserError

DEFAULT_MODEL = "smollm2-135m-instruct"


def _one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


Paths = Annotated[list[str], BeforeValidator(_one_or_many)]


"""File paths: a list, or one path as a plain string."""

Threads = Annotated[int, Field(ge=1)] | Literal["auto"] | None
"""torch intra-op threads: "auto" (the cores free now: usable cores minus the load average,
at least 1; `models/threads.py`), a count, or null (torch's default)."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    path_fields: ClassVar[tuple[str, ...]] = ()
    """This class's own fields holding data paths: relative ones written in a config file resolve
    against the file's directory (`config.loading`); nested sections declare their own."""

    @classmethod
    def names_no_file(cls, field: str, value: str) -> bool:
        """Whether `value` of the path field `field` names something other than a file (kept as given)."""
        return False


class ConfigError(UserError):
    """A config file or override that does not validate."""


_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def run_name_problem(name: str) -> str | None:
    """Why `name` cannot name a run directory (empty, hidden, leaving the run root, odd
    characters), or None. The one rule: configs check it at load (so `--dry-run` refuses
    what the run would) and `runs.stage` before it creates anything."""
    if not name or not name.strip():
        return "run name is empty; pass --name NAME (letters, digits, '.', '_', '-')"
    if "/" in name or "\\" in name or name in (".", "..") or ".." in name:
        return (
            f"run name {name!r} would leave the run root; use a plain name (letters, digits, "
            "'.', '_', '-'), and --out to choose the run root"
        )
    if name.startswith("."):
        return f"run name {name!r} is hidden (starts with '.'); start it with a letter or digit"
    if not _RUN_NAME.fullmatch(name):
        return f"run name {name!r} has characters other than letters, digits, '.', '_', '-' (or is longer than 128)"
    return None


class RunSettings(Strict):
    """What every config that records a run shares: where it is written and what it is called."""

    out: str = "runs"
    """Run root: each run writes <out>/<name>/ and is recorded in <out>/registry.sqlite."""
    name: str | None = None
    """Run name (default: <command>-<timestamp>); re-using a name resumes that run."""

    @field_validator("name")
    @classmethod
    def _plain_name(cls, v: str | None) -> str | None:
        problem = None if v is None else run_name_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _memory_levers_fit_the_model(self) -> Any:
        # every training config has `train:` (TrainSettings) and most a `lora:` section
        train = getattr(self, "train", None)
        if getattr(train, "fsdp", False) and getattr(self, "lora", None) is not None:
            raise ValueError(
                "train.fsdp shards full-parameter training; set lora: null, or drop fsdp (LoRA's "
                "trainable weights are small: plain data-parallel training suits it)"
            )
        if getattr(train, "fsdp", False) and getattr(train, "compile", False):
            raise ValueError("train.fsdp with train.compile is not supported yet; drop one of them")
        if getattr(train, "fsdp", False) and getattr(train, "keep_best", None):
            raise ValueError(
                "train.fsdp with train.keep_best is not supported yet (the best weights are sharded); drop one of them"
            )
        return self
