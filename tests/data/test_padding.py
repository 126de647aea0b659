"""The one right-padding and the one pad-id rule (`data/padding.py`), by hand."""

from types import SimpleNamespace

import torch

from tempering.data.padding import PAD_ID, pad_id, right_pad


def test_right_pad_takes_a_width_a_dtype_and_entries_with_a_shape():
    ids, mask = right_pad([[5, 6], []], 9, width=3)
    assert ids.tolist() == [[5, 6, 9], [9, 9, 9]] and mask.tolist() == [[1, 1, 0], [0, 0, 0]]
    logprobs, _ = right_pad([[-0.5], [-1.25, -2.0]], 0.0, dtype=torch.float32)
    assert logprobs.dtype == torch.float32 and logprobs.tolist() == [[-0.5, 0.0], [-1.25, -2.0]]
    routed = [torch.tensor([[[1, 2]]]), torch.zeros((0, 1, 2), dtype=torch.long)]  # (n, layers, k)
    experts, mask = right_pad(routed, -1, width=2)
    assert experts.shape == (2, 2, 1, 2) and experts[0].tolist() == [[[1, 2]], [[-1, -1]]]
    assert (experts[1] == -1).all() and mask.tolist() == [[1, 0], [0, 0]]


def test_one_pad_id_rule_the_pad_token_else_end_of_sequence():
    """The agent's expert SFT used 0 where the engines used EOS for a tokenizer without a pad."""
    assert pad_id(SimpleNamespace(pad_token_id=3, eos_token_id=2)) == 3
    assert pad_id(SimpleNamespace(pad_token_id=None, eos_token_id=2)) == 2
    assert pad_id(SimpleNamespace(pad_token_id=None, eos_token_id=None)) == PAD_ID
