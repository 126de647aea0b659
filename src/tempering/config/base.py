"""The base of every config: strict models (unknown keys are errors), path lists, the default model."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict

DEFAULT_MODEL = "smollm2-135m-instruct"


def _one_or_many(v: Any) -> Any:
    return [v] if isinstance(v, str) else v


Paths = Annotated[list[str], BeforeValidator(_one_or_many)]


"""File paths: a list, or one path as a plain string."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class ConfigError(ValueError):
    """A config file or override that does not validate."""
