"""Long-context tasks: facts hidden at a chosen depth in a haystack of a chosen length in tokens.

RULER-style kinds, each a question whose numeric answer only the planted sentences give:

  passkey    one pass key among filler
  multikey   the magic number of one key among several keys' numbers
  vartrack   a chain of assignments (VAR B = A ...) from a value to the asked variable, among other chains
  crossfact  two facts far apart (a count, and another count relative to it) that the answer adds up
  noisy      an access code among near-duplicate distractors (one word changed, another code)

Lengths are tokens of the prompt text under the given tokenizer (within 2% below the request
from 512 tokens up: filler is whole sentences); `depth` places the answer's first sentence at
that fraction of the haystack (0: first, 1: last). The same (kind, length, depth, seed, split)
gives the same task. Filler never holds a digit, and the train and heldout splits draw filler,
keys and names from disjoint word lists, so training haystacks never repeat an eval haystack.

`oracle(kind, prompt)` answers from the text alone; the tests delete the planted sentences and
check that it then fails, so the answer is in the haystack and nowhere else.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable, Protocol

from tempering.errors import UserError
from tempering.numbers import UNSIGNED_FLOAT

KINDS = ("passkey", "multikey", "vartrack", "crossfact", "noisy")
INTRO = "Below is a long text. Some sentences in it hold facts you will be asked about. Read it carefully."
ANSWER_RULE = "Answer with the number only."

_WORDS: dict[str, dict[str, tuple[str, ...]]] = {
    "train": {
        "subject": ("farmer", "sailor", "painter", "baker", "miner", "weaver", "tailor", "potter", "hunter", "monk"),
        "place": ("the harbour", "the orchard", "the quarry", "the meadow", "the chapel", "the bridge", "the mill"),
        "key": ("amber", "cobalt", "falcon", "maple", "quartz", "saffron", "thistle", "walnut", "zephyr", "lotus"),
        "name": ("Ada", "Boris", "Clara", "Dmitri", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas"),
    },
    "heldout": {
        "subject": ("pilot", "doctor", "singer", "clerk", "judge", "nurse", "poet", "guard", "chef", "scribe"),
        "place": ("the station", "the library", "the market", "the tower", "the garden", "the canal", "the depot"),
        "key": ("birch", "crimson", "ember", "glacier", "indigo", "juniper", "marble", "nectar", "onyx", "raven"),
        "name": ("Kira", "Liam", "Mira", "Nils", "Olga", "Pavel", "Rosa", "Stefan", "Tara", "Viktor"),
    },
}
_VERBS = ("walked slowly to", "looked quietly at", "thought about", "painted a picture of", "sang a song near")
_ADVERBS = ("in the morning", "after the rain", "before dinner", "on a calm day", "late at night", "with a friend")
_SHORT_VERBS = ("rested", "smiled", "waited", "left")
_COLOURS = ("red", "blue", "green", "white", "black", "yellow")
_DOORS = ("door", "gate", "hatch", "vault", "locker", "cabinet")


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


class LongctxError(UserError):
    """A request no haystack can meet; the message is one line naming the field."""


@dataclass(frozen=True)
class Planted:
    """The sentences a kind plants (with their depths), its question and its answer."""

    needles: list[tuple[float, str]]  # (depth in [0, 1], sentence); the answer's first at `depth`
    question: str
    answer: int
    required: tuple[int, ...]  # indices of the needles the answer needs


def _value(rng: random.Random, used: set[int]) -> int:
    while (v := rng.randrange(10_000, 100_000)) in used:
        pass
    used.add(v)
    return v


def _passkey(rng: random.Random, depth: float, words: dict, distractors: int) -> Planted:
    v = _value(rng, set())
    return Planted(
        [(depth, f"The pass key is {v}. Remember it. {v} is the pass key.")], "What is the pass key?", v, (0,)
    )


def _multikey(rng: random.Random, depth: float, words: dict, distractors: int) -> Planted:
    keys, used = rng.sample(words["key"], distractors + 1), set()
    needles = [
        (depth if i == 0 else rng.random(), f"The special magic number for {k} is: {_value(rng, used)}.")
        for i, k in enumerate(keys)
    ]
    answer = int(needles[0][1].rsplit(" ", 1)[1].rstrip("."))
    return Planted(needles, f"What is the special magic number for {keys[0]}?", answer, (0,))


def _var(rng: random.Random, used: set[str]) -> str:
    while (name := "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(5))) in used:
        pass
    used.add(name)
    return name


def _vartrack(rng: random.Random, depth: float, words: dict, distractors: int, hops: int = 3) -> Planted:
    names: set[str] = set()
    values: set[int] = set()
    needles: list[tuple[float, str]] = []
    last = ""
    for chain in range(distractors + 1):
        start = depth if chain == 0 else rng.random()
        spots = sorted(start + (1 - start) * rng.random() for _ in range(hops))
        prev = _var(rng, names)
        needles.append((start, f"VAR {prev} = {_value(rng, values)}."))
        for spot in spots:
            cur = _var(rng, names)
            needles.append((spot, f"VAR {cur} = VAR {prev}."))
            prev = cur
        last = prev if chain == 0 else last
    answer = int(needles[0][1].split("= ")[1].rstrip("."))
    return Planted(needles, f"What is the value of VAR {last}?", answer, tuple(range(hops + 1)))


def _crossfact(rng: random.Random, depth: float, words: dict, distractors: int) -> Planted:
    people = rng.sample(words["name"], distractors + 2)
    a, more = rng.randrange(10, 60), rng.randrange(10, 40)
    needles = [
        (depth, f"{people[0]}'s crate holds {a} apples."),
        ((depth + 0.5) % 1.0, f"{people[1]}'s crate holds {more} more apples than {people[0]}'s crate."),
    ]
    needles += [(rng.random(), f"{p}'s crate holds {rng.randrange(10, 60)} apples.") for p in people[2:]]
    return Planted(needles, f"How many apples does {people[1]}'s crate hold?", a + more, (0, 1))


def _noisy(rng: random.Random, depth: float, words: dict, distractors: int) -> Planted:
    colour, door = rng.choice(_COLOURS), rng.choice(_DOORS)
    near = {(colour, d) for d in _DOORS if d != door} | {(c, door) for c in _COLOURS if c != colour}
    used: set[int] = set()
    v = _value(rng, used)
    needles = [(depth, f"The access code for the {colour} {door} is {v}.")]
    for c, d in rng.sample(sorted(near), min(distractors + 2, len(near))):
        needles.append(
            (
                rng.random(),
                f"The access code for the {c} {d} is {v + rng.choice((-1, 1)) * rng.randrange(1, 10) if rng.random() < 0.5 else _value(rng, used)}.",
            )
        )
    return Planted(needles, f"What is the access code for the {colour} {door}?", v, (0,))


BUILDERS: dict[str, Callable[..., Planted]] = {
    "passkey": _passkey,
    "multikey": _multikey,
    "vartrack": _vartrack,
    "crossfact": _crossfact,
    "noisy": _noisy,
}


def _filler(rng: random.Random, words: dict) -> str:
    return (
        f"The {rng.choice(words['subject'])} {rng.choice(_VERBS)} {rng.choice(words['place'])} {rng.choice(_ADVERBS)}."
    )


@dataclass(frozen=True)
class LongctxTask:
    """One built haystack: the prompt text, its answer, token count and the planted sentences."""

    prompt: str
    answer: int
    tokens: int
    needles: list[str]
    required: list[str]


def build_task(
    kind: str,
    length: int,
    depth: float,
    seed: int,
    tokenizer: Tokenizer,
    split: str = "heldout",
    distractors: int = 3,
    window: int | None = None,
) -> LongctxTask:
    """One `kind` task whose prompt is `length` tokens (within 2% below) with its answer at `depth`.

    Raises:
        LongctxError: unknown kind, depth outside [0, 1], a length past `window`, or a length that
            cannot hold the planted sentences and the question.
    """
    check_request(kind, length, depth, window)
    rng = random.Random(f"longctx|{kind}|{split}|{length}|{depth}|{seed}")
    words = _WORDS[split]
    planted = BUILDERS[kind](rng, depth, words, distractors)
    question = f"{planted.question} {ANSWER_RULE}"

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    fixed = count(_compose([], planted.needles, question))
    if fixed + 4 * 8 > length:  # at least a few filler sentences around the needles
        raise LongctxError(f"length: {length} tokens cannot hold the {kind} needles and question (they take {fixed})")
    filler, total = [], fixed
    while total < length:
        sentence = _filler(rng, words)
        filler.append(sentence)
        total += count(" " + sentence)
    text = _compose(filler, planted.needles, question)
    while (n := count(text)) > length and filler:
        filler.pop()
        text = _compose(filler, planted.needles, question)
    for _ in range(8):  # top up with short sentences (a few tokens each) while they fit
        extra = f"The {rng.choice(words['subject'])} {rng.choice(_SHORT_VERBS)}."
        longer = _compose([*filler, extra], planted.needles, question)
        if (m := count(longer)) <= length:
            filler, text, n = [*filler, extra], longer, m
    return LongctxTask(
        text, planted.answer, n, [s for _, s in planted.needles], [planted.needles[i][1] for i in planted.required]
    )


_ID_LENGTH = re.compile(r"-L(?P<length>\d+)-")
_ID_DEPTH = re.compile(rf"-L\d+-d(?P<depth>{UNSIGNED_FLOAT})-")


def task_id(kind: str, length: int, depth: float, index: int) -> str:
    """A task's id, naming its kind, length and depth (`longctx-passkey-L4096-d0.50-3`): what gate
    rules on `<suite>@<length>` and the report's length x depth heatmap read back."""
    return f"longctx-{kind}-L{length}-d{depth:.2f}-{index}"


def id_length(task_id: str) -> int | None:
    """The length a task id names (`-L4096-`), or None when it names none."""
    m = _ID_LENGTH.search(task_id)
    return int(m["length"]) if m else None


def id_depth(task_id: str) -> float | None:
    """The depth a task id names right after its length (`-L4096-d0.50-`), or None."""
    m = _ID_DEPTH.search(task_id)
    return float(m["depth"]) if m else None


def check_request(kind: str, length: int, depth: float, window: int | None) -> None:
    """The one-line errors of a request, before any work (see `build_task`)."""
    if kind not in BUILDERS:
        raise LongctxError(f"kind: {kind!r} is not one of {', '.join(KINDS)}")
    if not 0.0 <= depth <= 1.0:
        raise LongctxError(f"depth: {depth} is outside [0, 1]")
    if window is not None and length > window:
        raise LongctxError(
            f"length: {length} tokens exceeds the model's window of {window} (scale its RoPE to go further)"
        )


def _compose(filler: list[str], needles: list[tuple[float, str]], question: str) -> str:
    """Intro, the haystack with each needle at its depth (stable for equal depths), the question."""
    slots = sorted(((round(d * len(filler)), i, s) for i, (d, s) in enumerate(needles)))
    body, at = [], 0
    for slot, _, sentence in slots:
        body += filler[at:slot] + [sentence]
        at = slot
    body += filler[at:]
    return f"{INTRO}\n\n{' '.join(body)}\n\n{question}"


def oracle(kind: str, prompt: str) -> int | None:
    """The answer read off the prompt text by rule (no model), or None when the text does not give it."""
    body, _, question = prompt.rpartition("\n\n")
    return _ORACLES[kind](body, question)


def _last_match(pattern: str, text: str) -> int | None:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else None


def _oracle_vartrack(body: str, question: str) -> int | None:
    target = re.search(r"VAR (\w+)\?", question)
    assigned = dict(re.findall(r"VAR (\w+) = ((?:VAR )?\w+)\.", body))
    name = target.group(1) if target else None
    for _ in range(len(assigned) + 1):
        value = assigned.get(name or "")
        if value is None:
            return None
        if not value.startswith("VAR "):
            return int(value)
        name = value.removeprefix("VAR ")
    return None


def _oracle_crossfact(body: str, question: str) -> int | None:
    asked = re.search(r"does (\w+)'s crate", question)
    if asked is None:
        return None
    rel = re.search(rf"{asked.group(1)}'s crate holds (\d+) more apples than (\w+)'s crate\.", body)
    if rel is None:
        return None
    base = _last_match(rf"{rel.group(2)}'s crate holds (\d+) apples\.", body)
    return None if base is None else base + int(rel.group(1))


def _keyed(pattern: str, asked_pattern: str) -> Callable[[str, str], int | None]:
    def read(body: str, question: str) -> int | None:
        asked = re.search(asked_pattern, question)
        return None if asked is None else _last_match(pattern.format(re.escape(asked.group(1))), body)

    return read


_ORACLES: dict[str, Callable[[str, str], int | None]] = {
    "passkey": lambda body, _q: _last_match(r"The pass key is (\d+)\.", body),
    "multikey": _keyed(r"magic number for {} is: (\d+)\.", r"number for (\w+)\?"),
    "vartrack": _oracle_vartrack,
    "crossfact": _oracle_crossfact,
    "noisy": _keyed(r"access code for the {} is (\d+)\.", r"code for the (\w+ \w+)\?"),
}
