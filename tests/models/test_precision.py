"""Precision is resolved once; what runs under it takes only a resolved value."""

import pytest
import torch

from tempering.models.precision import autocast, resolve_precision


def test_auto_resolves_to_a_concrete_precision_and_concrete_ones_stay():
    assert resolve_precision("auto") in ("bf16", "fp32")
    assert resolve_precision("bf16") == "bf16" and resolve_precision("fp32") == "fp32"


def test_an_unknown_precision_is_refused_naming_it():
    with pytest.raises(ValueError, match="'banana'"):
        resolve_precision("banana")


def test_autocast_needs_a_resolved_precision():
    with autocast("bf16", torch.device("cpu")):
        assert torch.is_autocast_enabled("cpu")
    with autocast("fp32", torch.device("cpu")):
        assert not torch.is_autocast_enabled("cpu")
    with pytest.raises(ValueError, match="resolve_precision"):
        autocast("auto", torch.device("cpu"))
