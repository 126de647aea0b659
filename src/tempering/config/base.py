"""The base of every config: strict models (unknown keys are errors), path lists, the default model."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

DEFAULT_MODEL = "smollm2-135m-instruct"


def _one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


Paths = Annotated[list[str], BeforeValidator(_one_or_many)]


"""File paths: a list, or one path as a plain string."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    path_fields: ClassVar[tuple[str, ...]] = ()
    """This class's own fields holding data paths: relative ones written in a config file resolve
    against the file's directory (`config.loading`); nested sections declare their own."""

    @classmethod
    def names_no_file(cls, field: str, value: str) -> bool:
        """Whether `value` of the path field `field` names something other than a file (kept as given)."""
        return False


class ConfigError(ValueError):
    """A config file or override that does not validate."""


class RunSettings(Strict):
    """What every config that records a run shares: where it is written and what it is called."""

    out: str = "runs"
    """Run root: each run writes <out>/<name>/ and is recorded in <out>/registry.sqlite."""
    name: str | None = None
    """Run name (default: <command>-<timestamp>); re-using a name resumes that run."""

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
        return self
