"""int8: which layers are quantized, the head choice, the original untouched, outputs close."""

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicInt8Linear

from tempering.models.quantize import CastLinear, quantize_int8, state_bytes
from tests.conftest import tiny_llama


@pytest.mark.parametrize("head", ["int8", "bf16", "fp32"])
def test_quantize_int8_layers_and_head(head):
    model = tiny_llama(vocab=256, seed=0).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize_int8(model, head)
    decoder_linears = [m for n, m in q.named_modules() if n.startswith("model.layers.") and n.endswith("proj")]
    assert len(decoder_linears) == 2 * 7 and all(isinstance(m, DynamicInt8Linear) for m in decoder_linears)
    expected_head = {"int8": DynamicInt8Linear, "bf16": CastLinear, "fp32": torch.nn.Linear}[head]
    assert type(q.lm_head) is expected_head
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # a copy: the original is intact
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref, out = model(ids).logits, q(ids).logits
    # int8 weights with per-channel scales: a relative error of about 1/127 per matmul, not more
    assert (out - ref).norm() / ref.norm() < 0.05
    assert state_bytes(q) < state_bytes(model)


def test_quantize_int8_rejects_an_unknown_head():
    with pytest.raises(ValueError, match="'int4' is not one of int8, bf16, fp32"):
        quantize_int8(tiny_llama(), "int4")
