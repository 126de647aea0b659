"""Packing has no cross-sample attention; batching order is deterministic and resumable."""

import pytest
import torch

from tempering.data.batches import ExampleOrder, SFTBatches, pack_batch, pack_rows, pad_batch, plan_rows
from tempering.data.render import IGNORE, RenderedExample
from tempering.objectives.sft import SFTObjective
from tests.conftest import random_examples, tiny_llama


def per_sample_loss_sum(model, examples):
    total = 0.0
    for e in examples:
        # The packed layout never predicts a conversation's first token; neither does this.
        loss, _ = SFTObjective().loss(model, pad_batch([e], pad_id=0))
        total += float(loss)
    return total


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("max_length", [200, 60])
def test_packed_loss_equals_sum_of_per_sample_losses(attn, max_length):
    model = tiny_llama(attn=attn).eval()
    examples = random_examples(6, lo=8, hi=40, seed=3)
    batch = pack_batch(examples, max_length=max_length, pad_id=0)
    assert batch["input_ids"].shape[0] < len(examples)  # really packed several per row
    with torch.no_grad():
        packed, _ = SFTObjective().loss(model, batch)
        separate = per_sample_loss_sum(model, examples)
    assert abs(float(packed) - separate) < 1e-4


def test_packed_sample_loss_does_not_change_when_its_neighbour_does():
    model = tiny_llama().eval()
    a, b = random_examples(2, lo=20, hi=20, seed=1)
    only_b = RenderedExample(b.input_ids, b.labels)
    a_masked = RenderedExample(a.input_ids, [IGNORE] * len(a.labels))  # loss from b only
    a_other = RenderedExample([t % 60 + 3 for t in reversed(a.input_ids)], [IGNORE] * len(a.labels))
    with torch.no_grad():
        l1, _ = SFTObjective().loss(model, pack_batch([a_masked, only_b], 100, 0))
        l2, _ = SFTObjective().loss(model, pack_batch([a_other, only_b], 100, 0))
    assert abs(float(l1) - float(l2)) < 1e-5


def test_pack_rows_first_fit_decreasing():
    assert pack_rows([5, 3, 4, 2], 7) == [[0, 3], [2, 1]]
    # width 8: rows [5,3] [4,2] -> 2 x 8 = 16 slots; width 5: [5] [4] [3,2] -> 3 x 5 = 15 slots
    assert plan_rows([5, 3, 4, 2], 8) == [[0], [2], [1, 3]]
    assert plan_rows([6, 6, 7], 20) == [[2, 0, 1]]  # 1 x 19 slots beats 3 x 7
    with pytest.raises(ValueError, match="exceeds max_length"):
        pack_rows([9], 8)


def test_example_order_resumes_exactly():
    a = ExampleOrder(10, seed=4)
    first = a.take(7)
    state = a.state_dict()
    rest = a.take(9)  # crosses into epoch 1
    b = ExampleOrder(10, seed=4)
    b.load_state_dict(state)
    assert b.take(9) == rest
    assert sorted(first + rest[:3]) == list(range(10))  # epoch 0 is a permutation


def test_batches_count_real_tokens():
    ex = random_examples(4, seed=2)
    for packing in (True, False):
        batch = SFTBatches(ex, 4, 100, 0, packing, seed=0).next_batch()
        assert batch["n_real_tokens"] == sum(len(e.input_ids) for e in ex)
