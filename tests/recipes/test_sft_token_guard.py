"""SFT-style stages (SFT, distillation, vision SFT) check every rendered example against the model's
embedding before the first step (`recipes.sft.sft_components`): a tokenizer with a token the model
has no row for is refused in one line naming the file and line, the id, its position and the
vocabulary; with the row there (vocab = the tokenizer's length) the same data builds."""

import json

import pytest

from tempering.batches import TokenIdOutOfRange
from tempering.config import DataSettings, TrainSettings
from tempering.recipes.sft import prepare_sft_data, sft_components
from tests.conftest import word_tokenizer

WORDS = ["<pad>", "<s>", "</s>", "<unk>", "user", "assistant", ":", "|", "Sure", ",", "here", "is", "that"]
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} | {% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def test_a_row_past_the_embedding_is_refused_naming_file_and_line(tmp_path):
    tok = word_tokenizer(WORDS, TEMPLATE)
    rows = [("here", "Sure , here"), ("is", "Sure , that")]  # "that" is the last word: id 12
    path = tmp_path / "train.jsonl"
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": u}, {"role": "assistant", "content": a}]}) + "\n"
            for u, a in rows
        )
    )
    settings = DataSettings(train=[str(path)], packing=False)
    data = prepare_sft_data(settings, tok, seed=0)
    train = TrainSettings.model_validate({"steps": 1, "batch_size": 2})
    sft_components(train, settings, data, 0, len(WORDS))  # every id has a row
    at = data.train[1].input_ids.index(len(WORDS) - 1)
    # user : is | assistant : Sure , that |  ->  "that" is the 9th token
    assert at == 8
    with pytest.raises(TokenIdOutOfRange) as refused:
        sft_components(train, settings, data, 0, len(WORDS) - 1)  # a model one row short of the tokenizer
    assert str(refused.value) == (
        f"{path}:2: token id {len(WORDS) - 1} at position 8 is outside the model's vocabulary "
        f"[0, {len(WORDS) - 1}) (its input embedding has {len(WORDS) - 1} rows)"
    )
