"""Activation (gradient) checkpointing, through transformers' own switch.

Each decoder layer keeps only its input in the forward pass and runs again in the backward
pass: activation memory falls from one set per layer to one layer's worth, for about one more
forward pass of compute. Non-reentrant `torch.utils.checkpoint`, so LoRA adapters get their
gradients without the inputs requiring grad.

transformers drops the KV cache inside a checkpointed layer while training with gradients on
(the replay would write it twice); engines decode in eval mode, so their cache stays, and
`checkpointed_now` tells `models/logprobs.py` when its cached prompt path cannot run and when
the LM head's chunks are checkpointed as well.
"""

from __future__ import annotations

from typing import Any

import torch


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def enable_checkpointing(model: Any) -> None:
    """Turn on non-reentrant activation checkpointing in every decoder layer of `model` (in place)."""
    base = _base(model)
    base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    # transformers also hooks the input embeddings to require grad, which only *reentrant*
    # checkpointing needs; the hook would send the backward pass through frozen lower layers and
    # undo `lora.last_layers` (backward stops at the lowest adapted layer).
    base.disable_input_require_grads()


def checkpointed_now(model: Any) -> bool:
    """Whether a forward pass now runs checkpointed layers (training, gradients on).

    Those layers ignore a KV cache, and the log-probs recompute their LM-head chunks in the
    backward pass too (the user traded compute for memory; without the switch no extra matmul).
    """
    layers = getattr(_base(model).get_decoder(), "layers", None)
    checkpointed = layers is not None and len(layers) > 0 and bool(getattr(layers[0], "gradient_checkpointing", False))
    return checkpointed and model.training and torch.is_grad_enabled()
