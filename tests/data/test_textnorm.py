"""Normalisation and the gram hash that dedup and decontamination share."""

import numpy as np

from tempering.data.textnorm import gram_hashes, normalize, row_tokens, stable_token_ids


def test_ascii_fast_path_and_unicode_path_agree():
    text = "Don't STOP -- the 3 cats' toys (12+5=17)!"
    assert normalize(text) == ["dont", "stop", "the", "3", "cats", "toys", "12", "+", "5", "=", "17"]
    # the same sentence with a typographic apostrophe and full-width digits takes the NFKC path
    assert normalize("Don\u2019t STOP -- the \uff13 cats\u2019 toys (12+5=17)!") == normalize(text)
    assert normalize("Stra\u00dfe") == ["strasse"]  # casefold, not lower
    assert row_tokens(["a b", "c"]) == ["a", "b", "c"]


def naive_gram_hash(ids: list[int], length: int) -> list[int]:
    """The documented rule, written out: polynomial over the window, then the splitmix64 mix."""
    mult, m1, m2, mask = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB, (1 << 64) - 1
    out = []
    for i in range(len(ids) - length + 1):
        h = 0
        for k in range(length):
            h = (h * mult + ids[i + k]) & mask
        h ^= (length * m2) & mask
        h ^= h >> 30
        h = (h * m1) & mask
        h ^= h >> 27
        h = (h * m2) & mask
        h ^= h >> 31
        out.append(h)
    return out


def test_gram_hashes_follow_the_documented_polynomial():
    ids = [7, 3, 1000, 2**32, 5, 5, 9, 1]
    for length in (1, 3, 8):
        assert gram_hashes(np.array(ids, dtype=np.uint64), length).tolist() == naive_gram_hash(ids, length)
    assert len(gram_hashes(np.array(ids, dtype=np.uint64), 9)) == 0
    # windows of different lengths over the same ids do not collide
    assert set(gram_hashes(np.array([1, 2], dtype=np.uint64), 2).tolist()).isdisjoint(
        gram_hashes(np.array([1, 2], dtype=np.uint64), 1).tolist()
    )


def test_stable_token_ids_are_crc32_plus_one():
    import zlib

    assert stable_token_ids(["cat", "dog"]).tolist() == [zlib.crc32(b"cat") + 1, zlib.crc32(b"dog") + 1]


def test_exact_answers_pair_sides_and_safety_cues_compare_texts_one_way():
    """A typographic apostrophe, a detokenised `can ' t` and a space before a full stop are the
    same text to the exact verifier, the pair audit and the refusal detector alike."""
    from tempering.data.audit import side_text
    from tempering.data.textnorm import canonical_text
    from tempering.types import Task
    from tempering.verifiers import score
    from tempering.verifiers.safety import detect_refusal

    typed, plain = "I Can \u2019t  stop .", "i can't stop."
    assert canonical_text(typed) == canonical_text(plain) == "i can't stop."
    exact = Task(id="t", prompt="q", verifier={"type": "exact", "answer": plain})
    assert score(exact, typed).value == 1.0
    assert side_text(typed, "user") == side_text(plain, "user")
    assert detect_refusal("I can \u2019t help with that .").hit == detect_refusal("I can't help with that.").hit
