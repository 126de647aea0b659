"""Stream pieces: one per token, joining to exactly the answer, with multi-byte characters split
across tokens held back until complete (the default model's byte-level tokenizer)."""

from tempering.serve.chat import token_pieces


def test_pieces_join_to_the_text_and_never_split_a_character(smol_tokenizer):
    text = "héllo 😀 wörld, 東京"
    ids = smol_tokenizer.encode(text, add_special_tokens=False)
    pieces = token_pieces(smol_tokenizer, ids, text, set())
    assert len(pieces) == len(ids) and "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces) and "" in pieces  # the emoji spans several tokens


def test_pieces_stop_at_a_cut_text(smol_tokenizer):
    full = "one two three four"
    ids = smol_tokenizer.encode(full, add_special_tokens=False)
    pieces = token_pieces(smol_tokenizer, ids, "one two", set())  # a stop string cut the text
    assert "".join(pieces) == "one two" and pieces[-1] == ""
