"""CUDA-graph decode (`engine.cuda_graphs`, rollout/graphs.py) on a GPU: the captured and replayed
decode gives the eager decode's greedy tokens, and each bucket is captured once.

"cuda" is marked `gpu(covers=["cuda-graphs"])` and skips without a GPU; "cpu" runs the same body
with the bucketed path forced on and its forward run eagerly (no capture there), so a bug in the
test itself shows on any machine. Tolerance as in test_cuda_paths.py: the same greedy tokens,
log-probs within 1e-4 (fp32; TF32 is off by default in torch).
"""

import pytest
import torch

from tempering.config import SamplingParams
from tempering.rollout import batching_engine
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.graphs import GraphDecode
from tests.conftest import tiny_llama
from tests.gpu.test_cuda_paths import assert_same_greedy, on


def forced(setting, device, config):
    """The switch turned on whatever the device (the bucketed path; off a GPU, not captured)."""
    return "engine.cuda_graphs: off" if setting == "off" else None


PROMPTS = [list(range(10, 27)), list(range(30, 44)), list(range(50, 58)), [5, 6, 7]]


def _model(tokenizer, device: str):
    """A tiny random Llama whose window (20 positions) cuts the prompts' answers to 3, 6, 10 and
    10 tokens and whose LM head never picks the end of sequence: the batch shrinks 8 -> 6 -> 2
    rows as pairs finish, so decode steps run in three buckets."""
    model = tiny_llama(vocab=len(tokenizer), seed=5).eval()
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id] = 0
    model.config.max_position_embeddings = 20
    return model.to(device)


def _generate(engine: BatchingEngine):
    return engine.generate(PROMPTS, SamplingParams(n=2, max_new_tokens=10, temperature=0.0))


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["cuda-graphs"])))
def test_graph_decode_gives_the_eager_greedy_tokens_and_captures_each_bucket_once(device, smol_tokenizer, monkeypatch):
    model = _model(smol_tokenizer, device)
    eager = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=8, cuda_graphs="off")
    want = _generate(eager)
    assert [len(group[0].token_ids) for group in want] == [3, 6, 10, 10]
    if device == "cpu":  # no GPU: the bucketed path, run eagerly
        monkeypatch.setattr(batching_engine, "cuda_graphs_off", forced)
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=8, cuda_graphs="on")
    assert_same_greedy(_generate(engine), want)
    # steps 1-2: 8 rows (bucket 8 of 1, 2, 4, 8); 3-5: 6 (bucket 8); 6-9: 4 (bucket 4)
    assert engine.graph_steps == {8: 5, 4: 4}
    assert_same_greedy(_generate(engine), want)  # the same weights' tensors: no capture again
    assert engine.graph_steps == {8: 10, 4: 8}
    assert engine.graph_captures == (2 if device == "cuda" else 0)


@pytest.mark.parametrize("device", on(pytest.mark.gpu(covers=["cuda-graphs"])))
def test_a_replayed_bf16_decode_equals_the_same_decode_run_eagerly(device, smol_tokenizer, monkeypatch):
    """bf16 autocast inside a graph (its cast cache off): the replay gives what the same
    fixed-shape forward gives without capture, on fp32 weights cast per call as a trainer's are."""
    model = _model(smol_tokenizer, device)
    monkeypatch.setattr(batching_engine, "cuda_graphs_off", forced)
    real = GraphDecode.__init__

    def uncaptured(self, forward, cache, buckets, pad_id, capture):
        real(self, forward, cache, buckets, pad_id, capture=False)

    with monkeypatch.context() as patch:
        patch.setattr(GraphDecode, "__init__", uncaptured)
        want = _generate(BatchingEngine(model, smol_tokenizer, precision="bf16", max_slots=8, cuda_graphs="auto"))
    engine = BatchingEngine(model, smol_tokenizer, precision="bf16", max_slots=8, cuda_graphs="auto")
    for _ in range(2):  # the second call's bf16 copies are new tensors: captured again where moved
        assert_same_greedy(_generate(engine), want)
    assert engine.graph_steps == {8: 10, 4: 8}
    assert engine.graph_captures >= (2 if device == "cuda" else 0)
