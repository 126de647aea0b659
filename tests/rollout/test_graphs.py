"""CUDA-graph decode, the parts a CPU runs: which bucket a step takes, how a batch is padded to it
and cut back, the fixed-shape slot cache, the switch (`engine.cuda_graphs`), and the batching
engine's bucketed decode over that cache giving the dynamic path's greedy tokens.

The capture itself needs a GPU (tests/gpu/test_graph_decode.py); here the bucketed path runs its
forward eagerly over the same static buffers, or under a stand-in capture that counts."""

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tempering.config import EngineSettings, SamplingParams
from tempering.errors import UserError
from tempering.rollout import batching_engine
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.graphs import GraphDecode, bucket_for, cuda_graphs_off, decode_buckets, pad_to_bucket
from tempering.rollout.kvcache import StaticSlotKVCache
from tempering.rollout.select import build_engine, check_engine
from tests.conftest import tiny_llama

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device name; no GPU is touched


def test_buckets_are_powers_of_two_below_the_slots_then_the_slots():
    assert decode_buckets(256) == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert decode_buckets(48) == (1, 2, 4, 8, 16, 32, 48)
    assert decode_buckets(6) == (1, 2, 4, 6)
    assert decode_buckets(1) == (1,)
    with pytest.raises(ValueError):
        decode_buckets(0)


def test_a_step_runs_in_the_smallest_bucket_that_holds_it():
    buckets = decode_buckets(48)
    cases = {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 17: 32, 32: 32, 33: 48, 48: 48}
    assert {rows: bucket_for(rows, buckets) for rows in cases} == cases
    for rows in (0, 49):
        with pytest.raises(ValueError, match="do not fit the decode buckets"):
            bucket_for(rows, buckets)


@given(st.integers(1, 600).flatmap(lambda slots: st.tuples(st.just(slots), st.integers(1, slots))))
def test_every_batch_gets_a_bucket_under_twice_its_size_and_none_smaller_fits(slots_rows):
    slots, rows = slots_rows
    buckets = decode_buckets(slots)
    bucket = bucket_for(rows, buckets)
    assert bucket in buckets and rows <= bucket < 2 * rows
    assert not [b for b in buckets if rows <= b < bucket]


def test_padding_keeps_the_live_rows_first_and_adds_pad_tokens_at_position_zero():
    assert pad_to_bucket([7, 8, 9], [5, 3, 10], 4, pad_id=0) == ([7, 8, 9, 0], [5, 3, 10, 0])
    assert pad_to_bucket([7, 8], [5, 3], 2, pad_id=1) == ([7, 8], [5, 3])
    with pytest.raises(ValueError):
        pad_to_bucket([7, 8, 9], [5, 3, 10], 2, pad_id=0)


def test_the_switch_is_on_for_cuda_devices_under_auto_and_refuses_on_where_it_cannot_capture():
    assert [cuda_graphs_off(s, CUDA) for s in ("auto", "on")] == [None, None]
    assert cuda_graphs_off("off", CUDA) == "engine.cuda_graphs: off"
    assert cuda_graphs_off("auto", CPU) == "needs a CUDA device; the model samples on cpu"
    with pytest.raises(UserError, match="on needs a CUDA device; the model samples on cpu"):
        cuda_graphs_off("on", CPU)
    dynamic = SimpleNamespace(rope_parameters={"rope_type": "dynamic", "factor": 2.0})
    assert cuda_graphs_off("auto", CUDA, dynamic) == "rope type 'dynamic' reads positions back to the host each forward"
    with pytest.raises(UserError, match="rope type 'dynamic'"):
        cuda_graphs_off("on", CUDA, dynamic)
    linear = SimpleNamespace(rope_parameters={"rope_type": "linear", "factor": 2.0})
    assert cuda_graphs_off("auto", CUDA, linear) is None
    with pytest.raises(ValueError):
        cuda_graphs_off("yes", CUDA)


def test_the_setting_is_a_batching_key_and_on_without_a_gpu_is_one_line():
    assert EngineSettings().cuda_graphs == "off"  # until a GPU run has checked the captures
    with pytest.raises(ValidationError, match="cuda_graphs applies to engine kind 'batching' only"):
        EngineSettings(kind="hf", cuda_graphs="off")
    with pytest.raises(ValidationError):
        EngineSettings.model_validate({"cuda_graphs": "yes"})
    if torch.cuda.is_available():
        pytest.skip("the refusal needs a host without a GPU")
    with pytest.raises(UserError) as refused:
        check_engine(EngineSettings(cuda_graphs="on"))
    assert "\n" not in str(refused.value) and "engine.cuda_graphs" in str(refused.value)


def _layer_kv(batch: int, length: int, fill: float) -> list[tuple[torch.Tensor, torch.Tensor]]:
    k = torch.full((batch, 2, length, 4), fill)
    return [(k, k + 1)]


def test_the_static_cache_has_one_shape_and_keeps_its_tensors():
    cache = StaticSlotKVCache(rows=8, length=256)
    cache.reserve(rows=3, length=20)  # a check, not an allocation size
    cache.write_prefill(_layer_kv(1, 5, 1.0), [[0, 1]], [5])
    assert cache.keys[0].shape == (8, 2, 256, 4)
    with pytest.raises(ValueError, match="do not fit a static cache"):
        cache.reserve(rows=9, length=20)
    address = cache.keys[0].data_ptr()
    cache.release()
    assert cache.keys[0].data_ptr() == address and cache.nbytes == 2 * 8 * 2 * 256 * 4 * 4


def test_a_static_decode_attends_over_every_position_and_writes_each_row_at_its_own():
    cache = StaticSlotKVCache(rows=4, length=16)
    cache.write_prefill(_layer_kv(4, 6, 1.0), [[0], [1], [2], [3]], [6, 3, 1, 1])
    cache.bind(torch.tensor([6, 3, 0, 0]), 15)  # two live rows, two dummies at position 0
    assert cache.decode_mask()[:, 0, 0].sum(dim=1).tolist() == [7, 4, 1, 1]
    new = torch.arange(4.0)[:, None, None, None].expand(4, 2, 1, 4)
    keys, values = cache.update(new, new + 10, 0)
    assert keys.shape == values.shape == (4, 2, 16, 4)
    assert [keys[b, 0, p, 0].item() for b, p in enumerate([6, 3, 0, 0])] == [0.0, 1.0, 2.0, 3.0]
    assert keys[0, 0, 5, 0].item() == 1.0 and values[1, 0, 3, 0].item() == 11.0


def _model_and_prompts(tokenizer):
    """A model whose window (20) cuts the three prompts' answers to 3, 6 and 10 tokens, and whose
    LM head never picks the end of sequence (its row zeroed), so every answer runs to its cut."""
    model = tiny_llama(vocab=len(tokenizer), seed=5).eval()
    with torch.no_grad():
        model.lm_head.weight[tokenizer.eos_token_id] = 0
    model.config.max_position_embeddings = 20
    prompts = [list(range(10, 27)), list(range(30, 44)), list(range(50, 58))]  # 17, 14, 8 tokens
    return model, prompts


GREEDY_PAIRS = SamplingParams(n=2, max_new_tokens=10, temperature=0.0)


@pytest.fixture
def bucketed(monkeypatch):
    """The switch turned on for the CPU: decode steps take the bucketed path, run eagerly."""
    monkeypatch.setattr(
        batching_engine, "cuda_graphs_off", lambda setting, device, config: setting if setting == "off" else None
    )


def test_bucketed_decode_gives_the_dynamic_paths_greedy_tokens_in_hand_derived_buckets(smol_tokenizer, bucketed):
    model, prompts = _model_and_prompts(smol_tokenizer)
    prompts = [*prompts, [5, 6, 7]]  # a fourth pair, cut at 10 tokens too
    want = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=8, cuda_graphs="off").generate(
        prompts, GREEDY_PAIRS
    )
    assert [[len(c.token_ids) for c in group] for group in want] == [[3, 3], [6, 6], [10, 10], [10, 10]]
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=8, cuda_graphs="auto")
    got = engine.generate(prompts, GREEDY_PAIRS)
    for got_group, want_group in zip(got, want, strict=True):
        for g, w in zip(got_group, want_group, strict=True):
            assert g.token_ids == w.token_ids
            assert max(abs(a - b) for a, b in zip(g.logprobs, w.logprobs, strict=True)) < 1e-5
    # decode steps 1-2: eight sequences (bucket 8 of 1, 2, 4, 8); 3-5: six once the 3-token pair
    # left (bucket 8: two dummy rows; the last pair moved into the freed slots); 6-9: the four
    # 10-token sequences (bucket 4)
    assert engine.graph_steps == {8: 5, 4: 4}
    assert engine.graph_captures == 0  # off a GPU the forward runs eagerly


def test_the_auto_setting_keeps_the_dynamic_path_on_the_cpu(smol_tokenizer):
    model, prompts = _model_and_prompts(smol_tokenizer)
    engine = build_engine(EngineSettings(cuda_graphs="auto"), model, smol_tokenizer, "fp32")
    engine.generate(prompts, GREEDY_PAIRS)
    assert engine.cuda_graphs == "auto" and engine.graph_steps == {}
    assert engine.cuda_graphs_off == "needs a CUDA device; the model samples on cpu"


class _StandIn:
    """A captured graph stood in for on the CPU: `replay` reruns the forward into the output
    buffer made at capture, as a replay rewrites its static output."""

    def __init__(self, forward, inputs, out):
        self.forward, self.inputs, self.out = forward, inputs, out

    def replay(self) -> None:
        self.out.copy_(self.forward(self.inputs[0], self.inputs[1]))


@pytest.fixture
def stand_in_graphs(bucketed, monkeypatch):
    """The bucketed path on the CPU with captures stood in for (`_StandIn`), and counted."""

    def capture(self, bucket, inputs):
        out = self.forward(inputs[0], inputs[1])
        self._graphs[bucket] = (_StandIn(self.forward, inputs, out), out)
        self.captures += 1
        return self._graphs[bucket]

    real = GraphDecode.__init__
    monkeypatch.setattr(GraphDecode, "_capture", capture)
    monkeypatch.setattr(
        GraphDecode,
        "__init__",
        lambda self, forward, cache, buckets, pad_id, capture: real(
            self, forward, cache, buckets, pad_id, capture=True
        ),
    )


def test_each_bucket_is_captured_once_and_again_only_after_the_weights_move(smol_tokenizer, stand_in_graphs):
    model, prompts = _model_and_prompts(smol_tokenizer)
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=6, cuda_graphs="auto")
    want = [[c.token_ids for c in group] for group in engine.generate(prompts, GREEDY_PAIRS)]
    assert engine.graph_captures == 3  # buckets 6, 4 and 2
    with torch.no_grad():
        model.model.norm.weight.mul_(1.0)  # in place: the graphs still read the right tensors
    assert [[c.token_ids for c in group] for group in engine.generate(prompts, GREEDY_PAIRS)] == want
    assert engine.graph_captures == 3 and engine.graph_steps == {6: 4, 4: 6, 2: 8}
    model.model.norm.weight = torch.nn.Parameter(model.model.norm.weight.detach().clone())  # a new tensor
    assert [[c.token_ids for c in group] for group in engine.generate(prompts, GREEDY_PAIRS)] == want
    assert engine.graph_captures == 6


def test_a_larger_call_makes_a_new_static_cache_and_a_smaller_one_keeps_it(smol_tokenizer, stand_in_graphs):
    model, prompts = _model_and_prompts(smol_tokenizer)
    engine = BatchingEngine(model, smol_tokenizer, precision="fp32", max_slots=6, cuda_graphs="auto")
    engine.generate(prompts[:1], SamplingParams(max_new_tokens=3, temperature=0.0))
    assert engine.graph_steps == {1: 2} and engine.graph_captures == 1  # a 1-row cache
    engine.generate(prompts, GREEDY_PAIRS)  # 6 rows do not fit it: a new cache, its graphs counted afresh
    assert engine.graph_steps == {6: 2, 4: 3, 2: 4} and engine.graph_captures == 3
    engine.generate(prompts[1:], SamplingParams(max_new_tokens=3, temperature=0.0))  # 2 rows: kept
    assert engine.graph_steps == {6: 2, 4: 3, 2: 6} and engine.graph_captures == 3
