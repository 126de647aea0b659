"""What a token-by-token stream may send before the answer completes (`serve.live.sendable`)."""

from tempering.serve.live import sendable


def test_sendable_holds_back_what_later_tokens_could_change():
    assert sendable("Hello wor", ()) == "Hello wor"
    assert sendable("Hello ", ()) == "Hello"  # trailing space: a detokenizer may fold it into the next token
    assert sendable("caf\ufffd", ()) == "caf"  # a character split across tokens
    assert sendable("The answer is 4.\nQ", ("\nQ:",)) == "The answer is 4."  # could become the stop string
    assert sendable("The answer is 4.\nQ: next", ("\nQ:",)) == "The answer is 4."  # never past a stop string
    assert sendable("a END b STOP", ("STOP", "END")) == "a "  # the earliest stop string cuts: the rest is final
