"""A tiny random model saved with the default tokenizer, for the recipes' end-to-end runs."""

import pytest

from tests.conftest import tiny_llama


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, smol_tokenizer):
    """A module's tiny model directory (a test file with other needs defines its own `tiny_dir`)."""
    path = tmp_path_factory.mktemp("tiny")
    model = tiny_llama(vocab=49152, seed=5)
    model.config.eos_token_id = smol_tokenizer.eos_token_id
    model.save_pretrained(path)
    smol_tokenizer.save_pretrained(path)
    return path
