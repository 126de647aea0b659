"""`batches.check_token_ids`: the one guard of token ids against a model's input embedding. Ids
0 and vocab-1 pass; vocab and -1 are refused in one line naming the source, the id, its position
and the vocabulary."""

import numpy as np
import pytest
import torch

from tempering.batches import TokenIdOutOfRange, check_batch_ids, check_token_ids, embedding_rows
from tempering.errors import UserError
from tests.conftest import tiny_llama


@pytest.mark.parametrize("kind", [list, np.array, torch.tensor])
def test_ids_at_both_edges_pass_and_one_past_either_is_refused(kind):
    check_token_ids(kind([0, 5, 63]), 64, "prompt 0")
    with pytest.raises(TokenIdOutOfRange) as high:
        check_token_ids(kind([0, 5, 64, 3]), 64, "prompt 0")
    assert str(high.value) == (
        "prompt 0: token id 64 at position 2 is outside the model's vocabulary [0, 64) "
        "(its input embedding has 64 rows)"
    )
    with pytest.raises(TokenIdOutOfRange, match=r"^data\[1\]: token id -1 at position 0 is outside .*\[0, 64\)"):
        check_token_ids(kind([-1, 5]), 64, "data[1]")


def test_the_first_offending_position_of_a_batch_is_named_as_row_and_column():
    ids = torch.tensor([[1, 2, 3], [4, 99, -7]])
    with pytest.raises(TokenIdOutOfRange, match=r"token id 99 at position \(1, 1\)"):
        check_token_ids(ids, 64, "batch")


def test_it_is_a_user_error_and_empty_or_embedding_less_inputs_pass():
    assert issubclass(TokenIdOutOfRange, UserError)
    check_token_ids([], 64, "empty")
    check_token_ids([10**9], None, "a module with no input embedding")


def test_the_embedding_not_the_tokenizer_is_the_authority():
    model = tiny_llama(vocab=64)
    model.resize_token_embeddings(70)  # an embedding padded past the tokenizer: its rows count
    assert embedding_rows(model) == 70
    assert embedding_rows(torch.nn.Linear(2, 2)) is None


def test_a_batch_is_checked_field_by_field_and_labels_are_not_ids():
    batch = {"input_ids": torch.tensor([[3, 63]]), "labels": torch.tensor([[-100, 63]])}
    check_batch_ids(batch, 64, "training step 1, micro-batch 0")
    batch["completion_ids"] = torch.tensor([[5, 64]])
    with pytest.raises(TokenIdOutOfRange, match=r"^training step 1, micro-batch 0, completion_ids: token id 64"):
        check_batch_ids(batch, 64, "training step 1, micro-batch 0")
