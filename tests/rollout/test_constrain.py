"""Constrained decoding in the batching engine: a random model's every sample is valid JSON of
the schema (unconstrained it is not), stops when the grammar completes, and other engines refuse."""

import json

import jsonschema
import pytest
import torch

from tempering.config import SamplingParams
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.constrain import (
    Constraint,
    ConstraintError,
    json_schema_grammar,
    json_value,
    lark_grammar,
    unpack_bitmask,
)
from tempering.rollout.engine import HFEngine
from tests.conftest import tiny_llama

SCHEMA = {
    "type": "object",
    "properties": {
        "unit": {"enum": ["C", "F"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
    },
    "required": ["unit", "n", "ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(smol_tokenizer):
    model = tiny_llama(vocab=49152, seed=5)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    return BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=8)


def test_every_sample_is_valid_json_of_the_schema(engine, smol_tokenizer):
    prompts = [smol_tokenizer.encode(t) for t in ("weather?", "a b c", "json please")]
    free = engine.generate(prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=40, seed=1))
    constrained = engine.generate(
        prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=40, seed=1, grammar=json_schema_grammar(SCHEMA))
    )
    assert not any(_is_json(c.text) for g in free for c in g)  # a random model writes no JSON by itself
    for group in constrained:
        for c in group:
            jsonschema.validate(json.loads(c.text), SCHEMA)
            assert c.finish_reason == "stop" and c.text.startswith('{"unit": ')  # compact, ", " and ": "
            assert all(lp <= 0 for lp in c.logprobs) and len(c.logprobs) == len(c.token_ids)


def test_a_lark_grammar_with_a_json_item_and_literal_text(engine, smol_tokenizer):
    args = {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Oslo"]}},
        "required": ["city"],
        "additionalProperties": False,
    }
    grammar = lark_grammar(f'start: "<tool_call>" {json_value(args)} "</tool_call>"')
    (group,) = engine.generate(
        [smol_tokenizer.encode("call")], SamplingParams(temperature=0, max_new_tokens=30, grammar=grammar)
    )
    text = group[0].text
    assert text.startswith("<tool_call>") and text.endswith("</tool_call>")
    assert json.loads(text[len("<tool_call>") : -len("</tool_call>")])["city"] in ("Paris", "Oslo")


def test_a_grammar_that_does_not_compile_and_engines_without_constraints_refuse(engine, smol_tokenizer):
    with pytest.raises(ConstraintError, match="grammar does not compile"):
        engine.generate(
            [smol_tokenizer.encode("x")], SamplingParams(max_new_tokens=4, grammar=lark_grammar("start: ("))
        )
    static = HFEngine(engine.model, smol_tokenizer, precision="fp32")
    with pytest.raises(ValueError, match="HFEngine has no constrained decoding"):
        static.generate([[5, 6]], SamplingParams(max_new_tokens=4, grammar=json_schema_grammar(SCHEMA)))


def test_the_bitmask_unpacks_bit_t_mod_32_of_word_t_div_32():
    words = torch.tensor([0b101, -(2**31)], dtype=torch.int32)  # tokens 0 and 2; bit 31 of word 1 is token 63
    assert unpack_bitmask(words, 64).nonzero().flatten().tolist() == [0, 2, 63]
    assert unpack_bitmask(words, 40).nonzero().flatten().tolist() == [0, 2]  # past the vocabulary: cut


def test_restrict_masks_eagerly_without_llguidances_compiled_kernel(smol_tokenizer, monkeypatch):
    """llguidance's `apply_token_bitmask_inplace` is a torch.compile kernel that torch 2.13's
    inductor miscompiles on AVX-512 hosts (and that needs a C++ compiler): never called."""
    import llguidance.torch as llt

    def refuse(*_):
        raise AssertionError("llguidance's compiled kernel was called")

    monkeypatch.setattr(llt, "apply_token_bitmask_inplace", refuse)
    constraint = Constraint(smol_tokenizer, json_schema_grammar(SCHEMA))
    logits = torch.zeros(len(smol_tokenizer) + 7)  # a model's padded vocabulary: the extra rows go to -inf
    constraint.restrict(logits)
    allowed = logits.isfinite().nonzero().flatten().tolist()
    assert allowed and all(smol_tokenizer.decode([t]).startswith("{") for t in allowed)
    assert logits[len(smol_tokenizer) :].isneginf().all()


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
