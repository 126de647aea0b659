"""The base of every config: strict models (unknown keys are errors), path lists, the default model."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

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


class Options(Strict):
    """The settings of one registered kind of thing (a task source, an agent environment): each
    registration carries its own subclass, and a config writes its fields beside the name that
    picks it (`WithOptions`). The base has none."""


OptionsT = TypeVar("OptionsT", bound=Options)


class WithOptions(Strict):
    """A section naming a registered kind whose own settings (an `Options` subclass the registry
    gives, `options_class`) are written flat beside the shared fields, as configs always wrote
    them: `{source: builtin:arithmetic, n: 100, ops: "+"}`. A key neither the section nor the
    named kind has is a one-line error naming the kind's settings. The kind is chosen by name
    through its registry, a discriminated union that plug-ins extend (prime-rl writes the same
    as pydantic unions on a `type` field, closed when the config class is defined)."""

    options: Options = Field(default_factory=Options, exclude=True)
    """The named kind's own settings (written flat in a config, never as `options:`)."""

    @classmethod
    def options_class(cls, data: dict[str, Any]) -> tuple[type[Options], str]:
        """The settings class of the kind `data` names, and how an error names that kind."""
        return Options, cls.__name__

    def options_as(self, cls: type[OptionsT]) -> OptionsT:
        """The kind's own settings as the class it registered (its defaults where none were written)."""
        if type(self.options) is Options:
            return cls()
        if not isinstance(self.options, cls):
            raise TypeError(f"{type(self).__name__} holds {type(self.options).__name__}, not {cls.__name__}")
        return self.options

    @model_validator(mode="before")
    @classmethod
    def _split_options(cls, data: Any) -> Any:
        if not isinstance(data, dict) or isinstance(data.get("options"), Options):
            return data
        own = {k: v for k, v in data.items() if k in cls.model_fields and k != "options"}
        given = {k: v for k, v in data.items() if k not in cls.model_fields}
        if not given:  # nothing of the kind's own: its defaults (`options_as`), no registry asked
            return own
        model, what = cls.options_class(own)
        unknown = sorted(set(given) - set(model.model_fields))
        if unknown:
            takes = ", ".join(model.model_fields) or "none"
            raise ValueError(f"{unknown[0]!r} is not a setting of {what} (its own settings: {takes})")
        try:
            return {**own, "options": model.model_validate(given)}
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ValueError(
                f"{'.'.join(map(str, first['loc']))}: {first['msg'].removeprefix('Value error, ')} ({what})"
            ) from None

    @model_serializer(mode="wrap")
    def _flat(self, handler: Any, info: Any) -> dict[str, Any]:
        data = handler(self)
        kwargs = {"mode": info.mode, "exclude_unset": info.exclude_unset, "exclude_defaults": info.exclude_defaults}
        return {**data, **self.options.model_dump(**kwargs)}
