import pytest

from tempering.data.longctx import KINDS, LongctxError, build_task, id_depth, id_length, oracle, task_id


@pytest.fixture(scope="module")
def tok(smol_tokenizer):
    return smol_tokenizer


@pytest.mark.parametrize("kind", KINDS)
def test_the_answer_is_in_the_planted_sentences_and_nowhere_else(kind, tok):
    for seed, depth in [(0, 0.0), (1, 0.5), (2, 1.0)]:
        task = build_task(kind, 1024, depth, seed, tok, distractors=3)
        assert oracle(kind, task.prompt) == task.answer
        gutted = task.prompt
        for sentence in task.required:
            assert sentence in gutted
            gutted = gutted.replace(sentence, "")
        assert oracle(kind, gutted) != task.answer
        if kind != "crossfact":  # a sum is in no sentence; the others' digits appear only where planted
            assert str(task.answer) not in gutted
        question = task.prompt.rpartition("\n\n")[2]
        assert oracle(kind, "\n\n" + question) is None  # the question alone gives nothing


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("length", [512, 2048])
def test_lengths_hit_the_request_within_two_percent(kind, length, tok):
    for depth in (0.0, 0.3, 1.0):
        task = build_task(kind, length, depth, 7, tok)
        assert 0.98 * length <= task.tokens <= length
        assert task.tokens == len(tok.encode(task.prompt, add_special_tokens=False))


def test_the_same_seed_gives_the_same_task_and_the_splits_share_no_filler(tok):
    a, b = build_task("multikey", 1024, 0.5, 3, tok), build_task("multikey", 1024, 0.5, 3, tok)
    assert a == b
    assert build_task("multikey", 1024, 0.5, 4, tok).prompt != a.prompt
    train = build_task("passkey", 1024, 0.5, 3, tok, split="train").prompt
    heldout = build_task("passkey", 1024, 0.5, 3, tok, split="heldout").prompt
    sentences = lambda text: {
        s for s in text.split("\n\n")[1].split(". ") if "pass key" not in s and "Remember" not in s
    }  # noqa: E731
    assert not sentences(train) & sentences(heldout)


def test_the_needle_lands_at_its_depth(tok):
    for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
        task = build_task("passkey", 2048, depth, 0, tok)
        body = task.prompt.split("\n\n")[1]
        assert abs(body.index(task.needles[0]) / len(body) - depth) < 0.03


@pytest.mark.parametrize(
    ("kind", "length", "depth", "window", "words"),
    [
        ("passkey", 16_384, 0.5, 8192, ["length", "16384", "8192"]),
        ("passkey", 1024, 1.5, 8192, ["depth", "1.5", "[0, 1]"]),
        ("vartrack", 80, 0.5, 8192, ["length", "80", "cannot hold"]),
        ("needle", 1024, 0.5, 8192, ["kind", "needle", "passkey"]),
    ],
)
def test_bad_requests_are_one_line_errors_naming_the_field(kind, length, depth, window, words, tok):
    with pytest.raises(LongctxError) as err:
        build_task(kind, length, depth, 0, tok, window=window)
    assert "\n" not in str(err.value) and all(w in str(err.value) for w in words), str(err.value)


def test_a_task_id_names_its_length_and_depth_and_reads_back():
    assert task_id("passkey", 4096, 0.5, 3) == "longctx-passkey-L4096-d0.50-3"
    assert (id_length("longctx-passkey-L4096-d0.50-3"), id_depth("longctx-passkey-L4096-d0.50-3")) == (4096, 0.5)
    assert (id_length("longctx-noisy-L1024-d1.00-12"), id_depth("longctx-noisy-L1024-d1.00-12")) == (1024, 1.0)
    assert (id_length("arith-007"), id_depth("arith-007")) == (None, None)
    assert (id_length("doc-L512-intro"), id_depth("doc-L512-intro")) == (512, None)  # a length alone
