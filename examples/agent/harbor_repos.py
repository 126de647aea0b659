"""The small-repository Harbor tasks: a tiny Python package with a bug and its (visible) tests.

The verifier runs hidden cases (tests/check_<name>.py) against the package in /app; the last
task gives partial credit (reward.json: the share of its four functions that are fixed).
"""

from __future__ import annotations

from typing import Any, Callable

CHECK = '''"""Hidden check, run by /tests/test.sh under `python3 -I`: the nonce arrives on stdin before the
code under test is imported; values are compared by their own type."""
import json
import sys


def plain(got, want):
    if isinstance(want, float):
        return type(got) in (int, float) and float(got) == want
    if type(got) is not type(want):
        return False
    return json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


def main():
    nonce = sys.stdin.readline().strip()
    sys.path.append("/app")
    from {module} import {function}

    for args, want in {cases!r}:
        if not plain({function}(*args), want):
            print("failed", args)
            return
    print("passed", nonce)


main()
'''

PARTIAL_CHECK = '''"""Hidden check, run by /tests/test.sh under `python3 -I`: how many of the four functions pass
every case (each on its own; the nonce arrives on stdin before the code under test is imported)."""
import sys


def main():
    nonce = sys.stdin.readline().strip()
    sys.path.append("/app")
    import textutils.core as core

    passed = 0
    for name, cases in {cases!r}.items():
        try:
            ok = all(type(want) is type(got) and got == want
                     for args, want in cases for got in [getattr(core, name)(*args)])
        except Exception:
            ok = False
        passed += ok
    print("passed", nonce, passed)


main()
'''

PARTIAL_TEST = """#!/bin/bash
# Harbor verifier: partial credit, the share of fixed functions, written to reward.json.
mkdir -p /logs/verifier
nonce=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')
out=$(echo "$nonce" | python3 -I -B /tests/check_textutils.py 2>/dev/null | tail -n 1)
passed=0
case "$out" in "passed $nonce "[0-4]) passed=${out##* } ;; esac
python3 -I -c "import json, sys; n = int(sys.argv[1]); json.dump({'reward': n / 4, 'passed': n}, open('/logs/verifier/reward.json', 'w'))" "$passed"
"""

RUN_TESTS = "Its tests fail: run `cd /app && python3 -m unittest discover -s tests`."


def unit_test(module: str, function: str, call: str, want: str) -> str:
    return (
        f"import unittest\n\nfrom {module} import {function}\n\n\nclass T(unittest.TestCase):\n"
        f"    def test_{function}(self):\n        self.assertEqual({call}, {want})\n\n\n"
        "if __name__ == '__main__':\n    unittest.main()\n"
    )


def overwrite(path: str, text: str) -> str:
    return f"cat > {path} <<'EOF'\n{text}EOF"


SLUG_OK = 'import re\n\n\ndef slugify(text):\n    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))\n'
MEAN_OK = "def mean(values):\n    if not values:\n        return 0.0\n    return sum(values) / len(values)\n"
ROMAN = (
    "TABLE = [{pairs}]\n\n\ndef to_roman(n):\n    out = ''\n    for value, letters in TABLE:\n"
    "        while n >= value:\n            out += letters\n            n -= value\n    return out\n"
)
ROMAN_OK = ROMAN.format(
    pairs='(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"), (40, "XL"), '
    '(10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")'
)
FREQ = 'import re\nfrom collections import Counter\n\n\ndef count_words(text):\n    return dict(Counter(re.findall(r"[a-z\']+", {arg})))\n'
MEDIAN_OK = (
    "def median(values):\n    s = sorted(values)\n    mid = len(s) // 2\n"
    "    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n"
)
TEXTUTILS = {
    "reverse_words": ("    return text[::-1]\n", '    return " ".join(reversed(text.split()))\n'),
    "count_vowels": (
        '    return sum(c in "aeiou" for c in text)\n',
        '    return sum(c in "aeiou" for c in text.lower())\n',
    ),
    "is_palindrome": (
        "    return text == text[::-1]\n",
        '    s = "".join(c for c in text.lower() if c.isalnum())\n    return s == s[::-1]\n',
    ),
    "capitalize_words": (
        "    return text.capitalize()\n",
        '    return " ".join(w[:1].upper() + w[1:] for w in text.split())\n',
    ),
}
TEXTUTILS_CASES = {
    "reverse_words": [(("a b c",), "c b a"), (("one",), "one")],
    "count_vowels": [(("AEIou",), 5), (("xyz",), 0)],
    "is_palindrome": [(("Never odd or even",), True), (("abc",), False)],
    "capitalize_words": [(("hello big world",), "Hello Big World")],
}


def textutils(fixed: bool) -> str:
    return "\n\n".join(f"def {name}(text):\n{pair[fixed]}" for name, pair in TEXTUTILS.items())


def repo_tasks(Task: Callable[..., Any], nonce_check: Callable[[str], list[str]]) -> list[Any]:
    def repo(name, difficulty, split, instruction, module, function, broken, fixed, path, cases, visible, files=None):
        return Task(
            name,
            "python",
            difficulty,
            split,
            instruction,
            overwrite(path, fixed),
            files={path: broken, f"{module.split('.')[0]}/__init__.py": "", **visible, **(files or {})},
            checks=nonce_check(f"check_{name.replace('-', '_')}.py"),
            test_files={
                f"check_{name.replace('-', '_')}.py": CHECK.format(module=module, function=function, cases=cases)
            },
            tags=("repo",),
        )

    return [
        repo(
            "fix-slugify",
            "easy",
            "train",
            "The `textkit` package in `/app` has a bug. " + RUN_TESTS + " Fix the package, not the tests: "
            "`slugify(text)` must return the lower-case runs of letters and digits of `text` joined by `-` "
            "(`slugify('Hello World!')` is `'hello-world'`).",
            "textkit.slug",
            "slugify",
            SLUG_OK.replace("text.lower()", "text"),
            SLUG_OK,
            "textkit/slug.py",
            [(("Hello World",), "hello-world"), (("  Many   spaces ",), "many-spaces"), (("ABC 2!",), "abc-2")],
            {"tests/test_slug.py": unit_test("textkit.slug", "slugify", "slugify('Hello World')", "'hello-world'")},
        ),
        repo(
            "fix-mean",
            "easy",
            "train",
            "The `stats` package in `/app` has a bug. " + RUN_TESTS + " Fix the package, not the tests: "
            "`mean(values)` is the arithmetic mean, and 0.0 for an empty list.",
            "stats.mean",
            "mean",
            MEAN_OK.replace("/ len(values)", "/ (len(values) + 1)"),
            MEAN_OK,
            "stats/mean.py",
            [(([1, 2, 3],), 2.0), (([],), 0.0), (([5],), 5.0), (([1, 2],), 1.5)],
            {"tests/test_mean.py": unit_test("stats.mean", "mean", "mean([2, 4])", "3.0")},
        ),
        repo(
            "fix-roman",
            "medium",
            "train",
            "The `roman` package in `/app` has a bug. " + RUN_TESTS + " Fix the package, not the tests: "
            "`to_roman(n)` writes n (1 to 3999) in standard Roman numerals, with subtractive pairs (`IV`, `XC`, `CM`).",
            "roman.convert",
            "to_roman",
            ROMAN.format(pairs='(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")'),
            ROMAN_OK,
            "roman/convert.py",
            [((4,), "IV"), ((1994,), "MCMXCIV"), ((3,), "III"), ((2024,), "MMXXIV"), ((49,), "XLIX")],
            {"tests/test_convert.py": unit_test("roman.convert", "to_roman", "to_roman(9)", "'IX'")},
        ),
        repo(
            "fix-word-count",
            "medium",
            "heldout",
            "The `wordfreq` package in `/app` has a bug. " + RUN_TESTS + " Fix the package, not the tests: "
            "`count_words(text)` returns a dict of each word (lower case; letters and apostrophes) to its count.",
            "wordfreq.count",
            "count_words",
            FREQ.format(arg="text"),
            FREQ.format(arg="text.lower()"),
            "wordfreq/count.py",
            [(("The cat saw the Cat",), {"the": 2, "cat": 2, "saw": 1}), (("It's it",), {"it's": 1, "it": 1})],
            {"tests/test_count.py": unit_test("wordfreq.count", "count_words", "count_words('A a')", "{'a': 2}")},
        ),
        repo(
            "implement-median",
            "medium",
            "heldout",
            "The `numkit` package in `/app` lacks a function. " + RUN_TESTS + " Implement `median(values)` in "
            "`numkit/stats.py`: the middle value of the sorted values, or the mean of the two middle values "
            "when there is an even number of them.",
            "numkit.stats",
            "median",
            "def median(values):\n    raise NotImplementedError\n",
            MEDIAN_OK,
            "numkit/stats.py",
            [(([3, 1, 2],), 2.0), (([4, 1, 3, 2],), 2.5), (([7],), 7.0), (([1, 1, 5, 9],), 3.0)],
            {"tests/test_stats.py": unit_test("numkit.stats", "median", "median([5, 3, 4])", "4")},
        ),
        Task(
            "fix-textutils",
            "python",
            "hard",
            "train",
            "Each of the four functions in `/app/textutils/core.py` has a bug. " + RUN_TESTS + " Fix the package, "
            "not the tests: `reverse_words` reverses the order of the words; `count_vowels` counts a, e, i, o, u "
            "in either case; `is_palindrome` ignores case and anything but letters and digits; "
            "`capitalize_words` upper-cases the first letter of every word. Each fixed function earns a quarter "
            "of the reward.",
            overwrite("textutils/core.py", textutils(True)),
            files={
                "textutils/__init__.py": "",
                "textutils/core.py": textutils(False),
                "tests/test_core.py": unit_test("textutils.core", "reverse_words", "reverse_words('ab cd')", "'cd ab'"),
            },
            test=PARTIAL_TEST,
            test_files={"check_textutils.py": PARTIAL_CHECK.format(cases=TEXTUTILS_CASES)},
            tags=("repo", "partial-credit"),
        ),
    ]
