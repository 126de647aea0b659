"""The Trainer's last guard: a micro-batch whose token ids fall outside the model's embedding is
refused before it moves to the device, naming the step; ids at the edges train."""

import pytest
import torch

from tempering.batches import TokenIdOutOfRange
from tempering.config import TrainSettings
from tempering.data.batches import SFTBatches
from tempering.data.render import RenderedExample
from tempering.objectives.sft import SFTObjective
from tempering.train.trainer import Trainer
from tests.conftest import tiny_llama


def _trainer(ids: list[int], tmp_path) -> Trainer:
    examples = [RenderedExample(ids, [-100, *ids[1:]]) for _ in range(2)]
    settings = TrainSettings.model_validate(
        {"steps": 1, "batch_size": 2, "precision": "fp32", "seed": 0, "checkpoint": {"every": 100}}
    )
    return Trainer(
        tiny_llama(vocab=64), SFTObjective(), SFTBatches(examples, 2, 64, 0, False, seed=0), settings, tmp_path
    )


def test_ids_at_the_edges_of_the_embedding_train(tmp_path):
    record = _trainer([0, 5, 63, 7], tmp_path).train_step()
    assert record is not None and torch.isfinite(torch.tensor(record["loss"]))


@pytest.mark.parametrize("bad, at", [(64, 2), (-1, 0)])
def test_an_id_outside_the_embedding_is_refused_naming_the_step(tmp_path, bad, at):
    ids = [0, 5, 63, 7]
    ids[at] = bad
    trainer = _trainer(ids, tmp_path)
    with pytest.raises(TokenIdOutOfRange) as refused:
        trainer.train_step()
    assert str(refused.value).startswith(
        f"training step 1, micro-batch 0, input_ids: token id {bad} at position (0, {at}) "
        "is outside the model's vocabulary [0, 64)"
    )
    assert trainer.step == 0
