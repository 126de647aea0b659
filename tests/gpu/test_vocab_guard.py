"""Token ids outside the embedding never reach a CUDA device: on a GPU an out-of-range index into an
embedding is a device-side assert after which every CUDA call of the process fails, so the engines
and the Trainer refuse such ids on the host (`batches.check_token_ids`) and the CUDA context stays
usable. Each test runs on the CPU here too (the same body), so the test itself is checked anywhere;
the "cuda" case is marked `gpu` and skips without a GPU (tests/conftest.py)."""

import pytest
import torch

from tempering.batches import TokenIdOutOfRange
from tempering.config import SamplingParams, TrainSettings
from tempering.data.batches import SFTBatches
from tempering.data.render import RenderedExample
from tempering.objectives.sft import SFTObjective
from tempering.rollout.batching_engine import BatchingEngine
from tempering.rollout.engine import HFEngine
from tempering.train.trainer import Trainer
from tests.conftest import tiny_llama
from tests.rollout.test_speculative import _IdsTokenizer

VOCAB = 64
DEVICES = [pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]
PARAMS = SamplingParams(max_new_tokens=2, temperature=0.0)


def assert_device_still_computes(device: str) -> None:
    """A matmul on `device` after the refusals gives its exact value (a poisoned CUDA context raises here)."""
    a = torch.full((64, 64), 0.5, device=device)
    assert float((a @ a).sum()) == 64 * 64 * 64 * 0.25
    if device == "cuda":
        torch.cuda.synchronize()


@pytest.mark.parametrize("device", DEVICES)
def test_engines_refuse_ids_past_the_embedding_and_the_device_keeps_working(device):
    tok = _IdsTokenizer(VOCAB, eos=None)
    hf = HFEngine(tiny_llama(VOCAB).to(device), tok, precision="fp32")
    batching = BatchingEngine(tiny_llama(VOCAB).to(device), tok, precision="fp32", max_slots=2, max_len=32)
    for engine in (hf, batching):
        for bad in (VOCAB, -1):
            with pytest.raises(TokenIdOutOfRange, match=rf"^prompt 0: token id {bad} at position 1 "):
                engine.generate([[3, bad, 4]], PARAMS)
        assert_device_still_computes(device)
        assert len(engine.generate([[0, VOCAB - 1]], PARAMS)[0][0].token_ids) == 2
    batching.start()
    try:
        with pytest.raises(TokenIdOutOfRange, match=rf"^prompt 0: token id {VOCAB} at position 0 "):
            batching.submit([VOCAB], PARAMS)
        assert len(batching.submit([0, VOCAB - 1], PARAMS).result(timeout=120)[0].token_ids) == 2
    finally:
        batching.stop()
    assert_device_still_computes(device)


@pytest.mark.gpu
def test_the_trainer_refuses_a_batch_past_the_embedding_and_the_device_keeps_working(tmp_path):
    """The Trainer places its model on CUDA wherever torch sees one (its CPU case: tests/train/test_token_guard.py)."""
    settings = TrainSettings.model_validate(
        {"steps": 1, "batch_size": 2, "precision": "fp32", "seed": 0, "checkpoint": {"every": 100}}
    )

    def trainer(ids: list[int], run: str) -> Trainer:
        examples = [RenderedExample(ids, [-100, *ids[1:]]) for _ in range(2)]
        batches = SFTBatches(examples, 2, 64, 0, False, seed=0)
        return Trainer(tiny_llama(VOCAB), SFTObjective(), batches, settings, tmp_path / run)

    with pytest.raises(TokenIdOutOfRange, match=rf"^training step 1, micro-batch 0, input_ids: token id {VOCAB} "):
        trainer([0, 5, VOCAB, 7], "bad").train_step()
    assert_device_still_computes("cuda")
    record = trainer([0, 5, VOCAB - 1, 7], "good").train_step()
    assert record is not None and torch.isfinite(torch.tensor(record["loss"]))
