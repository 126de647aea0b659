"""Every config field is documented where it is defined (config.py promises it; users read
the descriptions in `--help`, docs and error messages)."""

import inspect

import pytest
from pydantic import BaseModel

import tempering.config
import tempering.evals.suite

MODULES = [tempering.config, tempering.evals.suite]


def config_models():
    return [
        cls
        for module in MODULES
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if issubclass(cls, BaseModel)
        and (cls.__module__ == module.__name__ or cls.__module__.startswith(module.__name__ + "."))
    ]


def test_the_walk_finds_the_models():
    names = {cls.__name__ for cls in config_models()}
    assert {"SFTConfig", "GRPOConfig", "SamplingSettings", "TrainSettings", "Suite"} <= names


@pytest.mark.parametrize("model", config_models(), ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_field_has_a_description(model):
    missing = [name for name, field in model.model_fields.items() if not (field.description or "").strip()]
    assert not missing, f"{model.__name__}: fields without a description: {missing}"
