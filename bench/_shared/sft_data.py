"""Deterministic, offline, synthetic chat data for SFT throughput benchmarks.

`make_bench_conversations(n, seed)` returns `n` examples in the conversational format that both
Tempering and TRL accept::

    {"messages": [{"role": "system" | "user" | "assistant", "content": str}, ...]}

Everything is procedural (word banks + templates + a seeded RNG); nothing is downloaded.
The length distribution is meant to look like real instruction-tuning data rather than a
constant: rendered with SmolLM2's chat template the examples span roughly 60 to 500 tokens,
skewed towards the short side (median around 180-200), with a minority of multi-turn chats.

Example `i` depends only on `(seed, i)`, so `make_bench_conversations(64, s)` is a prefix of
`make_bench_conversations(128, s)`.
"""

from __future__ import annotations

import random

__all__ = ["make_bench_conversations"]

# ----------------------------------------------------------------------------- word banks

_NAMES = [
    "Ava",
    "Ben",
    "Chloe",
    "Diego",
    "Elena",
    "Farah",
    "George",
    "Hana",
    "Ivan",
    "Jamal",
    "Keiko",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Priya",
    "Quinn",
    "Rosa",
    "Samir",
    "Tara",
]
_ITEMS = [
    ("apple", "apples"),
    ("book", "books"),
    ("marble", "marbles"),
    ("pencil", "pencils"),
    ("sticker", "stickers"),
    ("cookie", "cookies"),
    ("stamp", "stamps"),
    ("shell", "shells"),
    ("card", "cards"),
    ("plant", "plants"),
    ("coin", "coins"),
    ("ribbon", "ribbons"),
]
_PLACES = ["the market", "school", "the library", "a garage sale", "the bakery", "a craft fair", "the park"]

_TOPICS = [
    "photosynthesis",
    "the water cycle",
    "compound interest",
    "recursion in programming",
    "how vaccines work",
    "plate tectonics",
    "the French Revolution",
    "supply and demand",
    "machine learning",
    "the immune system",
    "climate change",
    "how a CPU executes instructions",
    "the stock market",
    "black holes",
    "version control with git",
    "healthy sleep habits",
    "the history of the printing press",
    "renewable energy",
    "how bridges carry loads",
    "public key cryptography",
    "the Roman Empire",
    "ocean currents",
    "time management",
    "how search engines rank pages",
    "the basics of nutrition",
]
_LIST_SUBJECTS = [
    "tips for learning a new language",
    "ways to save money on groceries",
    "ideas for a rainy day",
    "habits of productive people",
    "steps to start a vegetable garden",
    "reasons to learn to code",
    "ways to reduce stress at work",
    "things to pack for a camping trip",
    "ways to improve your writing",
    "exercises you can do at home",
    "strategies for studying for exams",
    "ways to be a better listener",
    "tips for a job interview",
    "ideas for a small birthday party",
    "ways to make a home more energy efficient",
]
_ADJ = [
    "simple",
    "important",
    "practical",
    "common",
    "effective",
    "surprising",
    "basic",
    "useful",
    "careful",
    "gradual",
    "consistent",
    "clear",
    "small",
    "reliable",
    "flexible",
    "natural",
]
_NOUNS = [
    "process",
    "idea",
    "system",
    "pattern",
    "method",
    "result",
    "example",
    "factor",
    "step",
    "habit",
    "resource",
    "principle",
    "question",
    "change",
    "structure",
    "goal",
    "routine",
]
_VERBS = [
    "improves",
    "explains",
    "supports",
    "changes",
    "reduces",
    "creates",
    "connects",
    "shapes",
    "affects",
    "protects",
    "reveals",
    "balances",
    "organizes",
    "drives",
    "limits",
    "strengthens",
]
_ADV = ["often", "usually", "gradually", "quickly", "rarely", "naturally", "directly", "clearly"]
_OPENERS = [
    "In practice,",
    "For example,",
    "At the same time,",
    "As a result,",
    "In most cases,",
    "More importantly,",
    "On the other hand,",
    "Over time,",
    "In simple terms,",
    "Because of this,",
    "Historically,",
    "To put it another way,",
]
_CLOSERS = [
    "I hope this helps!",
    "Let me know if you want more detail on any part.",
    "Feel free to ask a follow-up question.",
    "That is the short version of a big topic.",
    "",
]
_SYSTEM_PROMPTS = [
    "You are a helpful assistant.",
    "You are a patient math tutor. Show your reasoning step by step.",
    "You are a concise assistant. Answer clearly and accurately.",
    "You are a friendly teacher who explains ideas with simple examples.",
    "You are an expert assistant that writes well-structured answers.",
]
_FOLLOWUPS = [
    "Can you explain that in simpler terms?",
    "Can you give me another example?",
    "Why does that matter?",
    "Could you summarize that in a few sentences?",
    "What is a common mistake people make here?",
    "Thanks! What should I read next?",
    "How would you explain this to a ten-year-old?",
]


# ----------------------------------------------------------------------------- text pieces


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _sentence(rng: random.Random, topic: str) -> str:
    form = rng.randrange(5)
    a, n, v, adv = rng.choice(_ADJ), rng.choice(_NOUNS), rng.choice(_VERBS), rng.choice(_ADV)
    n2, a2 = rng.choice(_NOUNS), rng.choice(_ADJ)
    if form == 0:
        s = f"{_a(a)} {n} {adv} {v} the {a2} {n2} behind {topic}."
    elif form == 1:
        s = f"{rng.choice(_OPENERS)} the {n} {v} how people think about {topic}."
    elif form == 2:
        s = f"When studying {topic}, each {n} {v} the next {n2} in {_a(a)} way."
    elif form == 3:
        s = f"{rng.choice(_OPENERS)} {_a(a)} {n} {adv} {v} {_a(a2)} {n2}, which is easy to overlook."
    else:
        s = f"One {a} way to see {topic} is as {_a(n)} that {v} every {n2} around it."
    return s[0].upper() + s[1:]


def _paragraph(rng: random.Random, topic: str, n_sent: int) -> str:
    return " ".join(_sentence(rng, topic) for _ in range(max(1, n_sent)))


def _sentences_for_tokens(tokens: int) -> int:
    # A generated sentence is ~17 tokens with SmolLM2's tokenizer.
    return max(1, round(tokens / 17))


# ----------------------------------------------------------------------------- task kinds


def _math_problem(rng: random.Random, budget: int) -> tuple[str, str]:
    name, other = rng.sample(_NAMES, 2)
    sing, plur = rng.choice(_ITEMS)
    place = rng.choice(_PLACES)
    start = rng.randint(5, 90)
    n_ops = max(1, min(8, budget // 40))
    qparts = [f"{name} has {start} {plur}."]
    steps = []
    total = start
    for k in range(n_ops):
        op = rng.randrange(4)
        if op == 0:
            x = rng.randint(2, 40)
            qparts.append(f"Then {name} buys {x} more {plur} at {place}.")
            steps.append(f"Step {k + 1}: {name} buys {x} more, so {total} + {x} = {total + x}.")
            total += x
        elif op == 1 and total > 1:
            x = rng.randint(1, total - 1)
            qparts.append(f"{name} gives {x} {plur if x > 1 else sing} to {other}.")
            steps.append(f"Step {k + 1}: giving away {x} leaves {total} - {x} = {total - x}.")
            total -= x
        elif op == 2 and total < 400:
            m = rng.randint(2, 3)
            qparts.append(f"After that, the number of {plur} {name} has is multiplied by {m}.")
            steps.append(f"Step {k + 1}: multiplying by {m} gives {total} x {m} = {total * m}.")
            total *= m
        else:
            x = rng.randint(1, 25)
            qparts.append(f"{other} finds {x} {plur if x > 1 else sing} and hands them to {name}.")
            steps.append(f"Step {k + 1}: receiving {x} gives {total} + {x} = {total + x}.")
            total += x
    qparts.append(f"How many {plur} does {name} have at the end?")
    user = " ".join(qparts)
    if rng.random() < 0.3:
        user = "Solve this word problem and show your work. " + user
    answer = (
        f"Let's work through it one step at a time. {name} starts with {start} {plur}.\n"
        + "\n".join(steps)
        + f"\n\nSo {name} ends up with {total} {plur}. The answer is {total}."
    )
    return user, answer


def _list_answer(rng: random.Random, budget: int) -> tuple[str, str]:
    subject = rng.choice(_LIST_SUBJECTS)
    n_items = max(3, min(12, budget // 30))
    user = rng.choice(
        [
            f"Give me {n_items} {subject}.",
            f"Can you list {n_items} {subject}? Please keep each one short.",
            f"I need a numbered list of {n_items} {subject}.",
        ]
    )
    per_item = max(1, (budget - 20) // (n_items * 17))
    lines = [f"Here are {n_items} {subject}:"]
    for i in range(n_items):
        head = f"{rng.choice(_ADJ).capitalize()} {rng.choice(_NOUNS)}"
        lines.append(f"{i + 1}. **{head}**: {_paragraph(rng, subject, rng.randint(1, per_item))}")
    closer = rng.choice(_CLOSERS)
    if closer:
        lines.append("\n" + closer)
    return user, "\n".join(lines)


def _explanation(rng: random.Random, budget: int) -> tuple[str, str]:
    topic = rng.choice(_TOPICS)
    user = rng.choice(
        [
            f"Explain {topic}.",
            f"Can you explain {topic} in simple terms?",
            f"What should a beginner know about {topic}?",
            f"Write a short overview of {topic} for a student.",
        ]
    )
    n_sent = _sentences_for_tokens(budget)
    n_par = max(1, min(4, n_sent // 4))
    per = [n_sent // n_par + (1 if i < n_sent % n_par else 0) for i in range(n_par)]
    body = "\n\n".join(_paragraph(rng, topic, k) for k in per)
    closer = rng.choice(_CLOSERS)
    return user, body + (("\n\n" + closer) if closer else "")


def _short_qa(rng: random.Random, budget: int) -> tuple[str, str]:
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    kind = rng.randrange(3)
    if kind == 0:
        return (
            f"What is {a} times {b}?",
            f"To multiply {a} by {b}, split it up: {a} x {b // 10 * 10} = {a * (b // 10 * 10)} and "
            f"{a} x {b % 10} = {a * (b % 10)}. Adding them gives {a * b}. So {a} times {b} is {a * b}.",
        )
    if kind == 1:
        return (
            f"What is {a} plus {b}? Answer briefly.",
            f"Adding the tens and the ones separately: {a} + {b} = {a + b}. The answer is {a + b}.",
        )
    topic = rng.choice(_TOPICS)
    return f"In one or two sentences, what is {topic}?", _paragraph(rng, topic, _sentences_for_tokens(budget))


_KINDS = [(_math_problem, 0.3), (_list_answer, 0.25), (_explanation, 0.35), (_short_qa, 0.1)]


def _pick_kind(rng: random.Random):
    r, acc = rng.random(), 0.0
    for fn, w in _KINDS:
        acc += w
        if r < acc:
            return fn
    return _KINDS[-1][0]


def _target_tokens(rng: random.Random) -> int:
    # Log-normal, clipped: many short/medium answers, a long tail, like real SFT mixes.
    return int(min(400, max(30, rng.lognormvariate(4.95, 0.6))))


def _one_conversation(rng: random.Random) -> dict:
    messages: list[dict] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(_SYSTEM_PROMPTS)})
    budget = _target_tokens(rng)
    n_turns = 1
    if budget > 120 and rng.random() < 0.3:
        n_turns = rng.choice([2, 2, 3])
    per_turn = max(25, budget // n_turns)
    fn = _pick_kind(rng)
    user, answer = fn(rng, per_turn)
    messages += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    for _ in range(n_turns - 1):
        follow = rng.choice(_FOLLOWUPS)
        topic = rng.choice(_TOPICS)
        reply = _paragraph(rng, topic, _sentences_for_tokens(per_turn - 15))
        messages += [{"role": "user", "content": follow}, {"role": "assistant", "content": reply}]
    return {"messages": messages}


def make_bench_conversations(n: int, seed: int = 0) -> list[dict]:
    """Return `n` deterministic synthetic conversations (`{"messages": [...]}`) for benchmarking.

    Each conversation has an optional system message, one to three user/assistant exchanges, and ends
    with an assistant message. Example `i` depends only on `(seed, i)`.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    return [_one_conversation(random.Random(f"tempering-bench/{seed}/{i}")) for i in range(n)]


if __name__ == "__main__":  # quick look at the length distribution
    import os
    import statistics
    import sys

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SMOL_DIR", "/tmp/smol"))
    convs = make_bench_conversations(512, 0)
    lens = sorted(
        len(tok.apply_chat_template(c["messages"], tokenize=True, return_dict=True)["input_ids"]) for c in convs
    )
    q = lambda p: lens[min(len(lens) - 1, int(p * len(lens)))]
    print(
        f"n={len(lens)} min={lens[0]} p10={q(0.1)} p25={q(0.25)} median={q(0.5)} p75={q(0.75)} p90={q(0.9)} "
        f"max={lens[-1]} mean={statistics.mean(lens):.1f}"
    )
    print(f"multi-turn: {sum(sum(m['role'] == 'user' for m in c['messages']) > 1 for c in convs)}/{len(convs)}")
    print(convs[0]["messages"])
