"""A smaller student made from a teacher: a subset of its decoder layers, in order, with its
embeddings, final norm and LM head (the layer-dropping initialisation of DistilBERT and of
"shallow" draft models). The student keeps the teacher's vocabulary, so its logits compare
with the teacher's token for token (distillation's KL, speculative decoding's drafts).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Sequence

from tempering.errors import UserError

_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.*)$")


def student_from_teacher(teacher: Any, layers: Sequence[int]) -> Any:
    """A new model of the teacher's class with `len(layers)` decoder layers; student layer i
    starts as teacher layer layers[i]; everything outside the layers is copied.

    Raises:
        ValueError: a layer index the teacher does not have (naming it and the teacher's depth).
    """
    depth = teacher.config.num_hidden_layers
    bad = [i for i in layers if not 0 <= i < depth]
    if bad or not layers:
        raise UserError(f"student layers {list(layers)}: the teacher has layers 0..{depth - 1}")
    config = copy.deepcopy(teacher.config)
    config.num_hidden_layers = len(layers)
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in layers]
    source = {src: dst for dst, src in enumerate(layers)}
    state = {}
    for name, tensor in teacher.state_dict().items():
        match = _LAYER.match(name)
        if match is None:
            state[name] = tensor.detach().clone()
        elif int(match.group(1)) in source:
            state[f"model.layers.{source[int(match.group(1))]}.{match.group(2)}"] = tensor.detach().clone()
    student = type(teacher)(config).to(next(teacher.parameters()).dtype)
    student.load_state_dict(state, strict=True)
    return student
