"""The repositories of the built-in `repo` suite: small Python projects, correct as written here.

Each task of the suite (`make_envs.py: repo`) is one of these repositories with one or two
bugs planted (`BUGS`): a replacement of a correct snippet by a broken one. The agent gets
the broken repository in /work and must make its test suite pass; the hidden copies of
the same tests judge. Every repository runs its tests with
`python3 -m unittest discover -s tests` and uses the standard library only.
"""

from __future__ import annotations

PAGER = {
    "README.md": "# pager\n\nSplit lists into pages and build page navigation.\n\n"
    "Run the tests: `python3 -m unittest discover -s tests`\n",
    "pager/__init__.py": '"""Pagination helpers."""\n',
    "pager/pages.py": '''"""Split a list into pages."""

import math

DEFAULT_PER_PAGE = 10


def page_count(total, per_page=DEFAULT_PER_PAGE):
    """How many pages `total` items fill."""
    if per_page <= 0:
        raise ValueError("per_page must be positive")
    return math.ceil(total / per_page)


def page(items, number, per_page=DEFAULT_PER_PAGE):
    """The items on page `number` (pages count from 1)."""
    if number < 1:
        raise ValueError("pages count from 1")
    start = (number - 1) * per_page
    return items[start : start + per_page]
''',
    "pager/links.py": '''"""Navigation links around a page."""

from pager.pages import page_count


def neighbours(number, total, per_page=10):
    """(previous, next) page numbers around `number`; None at either end."""
    last = page_count(total, per_page)
    previous = number - 1 if number > 1 else None
    following = number + 1 if number < last else None
    return previous, following


def window(number, total, per_page=10, width=2):
    """Page numbers within `width` of `number`, clipped to the pages that exist."""
    last = page_count(total, per_page)
    return list(range(max(1, number - width), min(last, number + width) + 1))
''',
    "tests/test_pages.py": """import unittest

from pager.pages import page, page_count


class PageCountTest(unittest.TestCase):
    def test_exact(self):
        self.assertEqual(page_count(20, 10), 2)

    def test_partial_page(self):
        self.assertEqual(page_count(21, 10), 3)

    def test_empty(self):
        self.assertEqual(page_count(0, 10), 0)

    def test_default_size(self):
        self.assertEqual(page_count(35), 4)


class PageTest(unittest.TestCase):
    def test_first_page(self):
        self.assertEqual(page(list(range(25)), 1), list(range(10)))

    def test_last_page(self):
        self.assertEqual(page(list(range(25)), 3), [20, 21, 22, 23, 24])

    def test_page_zero(self):
        with self.assertRaises(ValueError):
            page([1, 2], 0)
""",
    "tests/test_links.py": """import unittest

from pager.links import neighbours, window


class LinksTest(unittest.TestCase):
    def test_middle(self):
        self.assertEqual(neighbours(2, 30, 10), (1, 3))

    def test_ends(self):
        self.assertEqual(neighbours(1, 30, 10), (None, 2))
        self.assertEqual(neighbours(3, 30, 10), (2, None))

    def test_window(self):
        self.assertEqual(window(5, 100, 10), [3, 4, 5, 6, 7])
        self.assertEqual(window(1, 100, 10), [1, 2, 3])
        self.assertEqual(window(10, 100, 10), [8, 9, 10])
""",
}

INVOICE = {
    "README.md": "# invoice\n\nInvoice lines, discounts and tax; amounts are whole cents.\n\n"
    "Run the tests: `python3 -m unittest discover -s tests`\n",
    "invoice/__init__.py": '"""Invoices in whole cents."""\n',
    "invoice/money.py": '''"""Amounts are whole cents (int)."""

from decimal import ROUND_HALF_UP, Decimal


def to_cents(text):
    """'12.34' -> 1234 (half a cent rounds up)."""
    return int((Decimal(text) * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def format_cents(cents, currency="EUR"):
    """1234 -> '12.34 EUR'."""
    sign = "-" if cents < 0 else ""
    cents = abs(cents)
    return f"{sign}{cents // 100}.{cents % 100:02d} {currency}"
''',
    "invoice/lines.py": '''"""Invoice lines: (description, quantity, unit price in cents)."""

from invoice.money import to_cents


def parse_line(text):
    """'Widget; 3; 2.50' -> ('Widget', 3, 250)."""
    description, quantity, price = (part.strip() for part in text.split(";"))
    return description, int(quantity), to_cents(price)


def line_total(line):
    _, quantity, price = line
    return quantity * price
''',
    "invoice/totals.py": '''"""Invoice totals with discount and tax."""

from invoice.lines import line_total

TAX_PERCENT = 20


def subtotal(lines):
    return sum(line_total(line) for line in lines)


def discount(amount, percent=0):
    """The amount after a percentage discount (whole cents, rounded down)."""
    return amount - amount * percent // 100


def total(lines, percent=0, tax_percent=TAX_PERCENT):
    net = discount(subtotal(lines), percent)
    return net + net * tax_percent // 100
''',
    "tests/test_lines.py": """import unittest

from invoice.lines import line_total, parse_line
from invoice.money import format_cents, to_cents


class MoneyTest(unittest.TestCase):
    def test_to_cents(self):
        self.assertEqual(to_cents("12.34"), 1234)
        self.assertEqual(to_cents("0.5"), 50)
        self.assertEqual(to_cents("0.125"), 13)

    def test_format(self):
        self.assertEqual(format_cents(1234), "12.34 EUR")
        self.assertEqual(format_cents(5), "0.05 EUR")

    def test_format_negative(self):
        self.assertEqual(format_cents(-250, "USD"), "-2.50 USD")


class LineTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_line("Widget; 3; 2.50"), ("Widget", 3, 250))

    def test_total(self):
        self.assertEqual(line_total(("Widget", 3, 250)), 750)
""",
    "tests/test_totals.py": """import unittest

from invoice.totals import discount, subtotal, total

LINES = [("Widget", 3, 250), ("Bolt", 10, 15)]


class TotalsTest(unittest.TestCase):
    def test_subtotal(self):
        self.assertEqual(subtotal(LINES), 900)

    def test_discount(self):
        self.assertEqual(discount(900, 10), 810)
        self.assertEqual(discount(900), 900)

    def test_total_with_tax(self):
        self.assertEqual(total(LINES), 1080)
        self.assertEqual(total(LINES, percent=10), 972)

    def test_empty_invoice(self):
        self.assertEqual(total([]), 0)
""",
}

TEXTKIT = {
    "README.md": "# textkit\n\nWords, slugs and line wrapping.\n\nRun the tests: `python3 -m unittest discover -s tests`\n",
    "textkit/__init__.py": '"""Small text utilities."""\n',
    "textkit/words.py": '''"""Word-level helpers."""

import re

WORD = re.compile(r"[A-Za-z0-9']+")


def words(text):
    return WORD.findall(text)


def word_count(text):
    return len(words(text))


def most_common(text, n=1):
    """The `n` most frequent words (lower-cased), ties broken alphabetically."""
    counts = {}
    for word in words(text.lower()):
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts, key=lambda w: (-counts[w], w))
    return ranked[:n]
''',
    "textkit/slug.py": '''"""URL slugs."""

from textkit.words import words


def slugify(title, separator="-", max_words=8):
    """'Hello, World!' -> 'hello-world' (at most `max_words` words)."""
    return separator.join(w.lower() for w in words(title)[:max_words])
''',
    "textkit/wrap.py": '''"""Greedy line wrapping."""


def wrap(text, width=20):
    """Lines of at most `width` characters (a longer word gets a line of its own)."""
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
''',
    "tests/test_words.py": """import unittest

from textkit.words import most_common, word_count, words


class WordsTest(unittest.TestCase):
    def test_count(self):
        self.assertEqual(word_count("Hello, world! It's fine."), 4)
        self.assertEqual(words(""), [])

    def test_most_common(self):
        self.assertEqual(most_common("b a b c a b", 2), ["b", "a"])
        self.assertEqual(most_common("A a B"), ["a"])

    def test_ties_alphabetical(self):
        self.assertEqual(most_common("pear apple"), ["apple"])
""",
    "tests/test_slug.py": """import unittest

from textkit.slug import slugify


class SlugTest(unittest.TestCase):
    def test_slug(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify(""), "")

    def test_separator(self):
        self.assertEqual(slugify("A b c", separator="_"), "a_b_c")

    def test_long_title(self):
        title = " ".join(f"w{i}" for i in range(10))
        self.assertEqual(slugify(title), "w0-w1-w2-w3-w4-w5-w6-w7")
""",
    "tests/test_wrap.py": """import unittest

from textkit.wrap import wrap


class WrapTest(unittest.TestCase):
    def test_wrap(self):
        self.assertEqual(wrap("the quick brown fox jumps", 10), ["the quick", "brown fox", "jumps"])
        self.assertEqual(wrap("a bb ccc", 4), ["a bb", "ccc"])

    def test_exact_width(self):
        self.assertEqual(wrap("abcd efghi", 10), ["abcd efghi"])

    def test_long_word(self):
        self.assertEqual(wrap("supercalifragilistic is long", 10), ["supercalifragilistic", "is long"])

    def test_empty(self):
        self.assertEqual(wrap("", 10), [])
        self.assertEqual(wrap("   ", 10), [])
""",
}

GRADES = {
    "README.md": "# grades\n\nScore statistics, letter grades and class reports.\n\n"
    "Run the tests: `python3 -m unittest discover -s tests`\n",
    "grades/__init__.py": '"""Grading helpers."""\n',
    "grades/stats.py": '''"""Summary statistics of scores."""


def mean(scores):
    if not scores:
        raise ValueError("no scores")
    return sum(scores) / len(scores)


def median(scores):
    if not scores:
        raise ValueError("no scores")
    ordered = sorted(scores)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
''',
    "grades/letters.py": '''"""Letter grades from percentages."""

BANDS = [(90, "A"), (80, "B"), (70, "C"), (60, "D")]


def letter(percent, bands=BANDS, fail="F"):
    for threshold, name in bands:
        if percent >= threshold:
            return name
    return fail
''',
    "grades/report.py": '''"""A one-line report per student."""

from grades.letters import letter
from grades.stats import mean


def summary(name, scores, maximum=100):
    percent = round(mean(scores) * 100 / maximum)
    return f"{name}: {percent}% ({letter(percent)})"


def class_report(students, maximum=100):
    """One summary line per student, sorted by name."""
    return [summary(name, scores, maximum) for name, scores in sorted(students.items())]
''',
    "tests/test_stats.py": """import unittest

from grades.stats import mean, median


class StatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 4]), 2.5)

    def test_median(self):
        self.assertEqual(median([3, 1, 2]), 2)
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            mean([])
        with self.assertRaises(ValueError):
            median([])
""",
    "tests/test_letters.py": """import unittest

from grades.letters import letter


class LetterTest(unittest.TestCase):
    def test_bands(self):
        self.assertEqual(letter(95), "A")
        self.assertEqual(letter(89), "B")
        self.assertEqual(letter(59), "F")

    def test_thresholds_included(self):
        self.assertEqual(letter(90), "A")
        self.assertEqual(letter(60), "D")

    def test_custom_bands(self):
        self.assertEqual(letter(75, bands=[(50, "P")], fail="X"), "P")
        self.assertEqual(letter(25, bands=[(50, "P")], fail="X"), "X")
""",
    "tests/test_report.py": """import unittest

from grades.report import class_report, summary


class ReportTest(unittest.TestCase):
    def test_summary(self):
        self.assertEqual(summary("Ann", [90, 80]), "Ann: 85% (B)")

    def test_other_maximum(self):
        self.assertEqual(summary("Bo", [18, 20], maximum=20), "Bo: 95% (A)")

    def test_class_report(self):
        self.assertEqual(class_report({"Zed": [50], "Amy": [100]}), ["Amy: 100% (A)", "Zed: 50% (F)"])
""",
}

INVENTORY = {
    "README.md": "# inventory\n\nA stock of items and the orders filled from it.\n\n"
    "Run the tests: `python3 -m unittest discover -s tests`\n",
    "inventory/__init__.py": '"""Stock keeping."""\n',
    "inventory/stock.py": '''"""A stock of items: name -> count."""


class Stock:
    def __init__(self, counts=None, low=5):
        self.counts = dict(counts or {})
        self.low = low

    def add(self, name, n=1):
        if n <= 0:
            raise ValueError("add a positive number")
        self.counts[name] = self.counts.get(name, 0) + n

    def remove(self, name, n=1):
        have = self.counts.get(name, 0)
        if n > have:
            raise ValueError(f"only {have} {name} left")
        self.counts[name] = have - n

    def low_stock(self):
        """Names whose count is at or below the `low` mark, sorted."""
        return sorted(name for name, count in self.counts.items() if count <= self.low)
''',
    "inventory/orders.py": '''"""Filling orders from a stock."""

from inventory.stock import Stock


def can_fill(stock, order):
    """Whether every line of `order` (name -> count) is in stock."""
    return all(stock.counts.get(name, 0) >= n for name, n in order.items())


def fill(stock, order):
    """Take an order out of the stock; nothing is taken when it cannot be filled."""
    if not can_fill(stock, order):
        return False
    for name, n in order.items():
        stock.remove(name, n)
    return True


def restock_list(stock, target=10):
    """(name, how many to order) for each low item, to bring it up to `target`."""
    return [(name, target - stock.counts[name]) for name in stock.low_stock()]


def new_stock(counts):
    return Stock(counts)
''',
    "tests/test_stock.py": """import unittest

from inventory.stock import Stock


class StockTest(unittest.TestCase):
    def test_add_remove(self):
        s = Stock()
        s.add("bolt", 3)
        s.remove("bolt")
        self.assertEqual(s.counts, {"bolt": 2})

    def test_remove_too_many(self):
        with self.assertRaises(ValueError):
            Stock({"bolt": 1}).remove("bolt", 2)
        with self.assertRaises(ValueError):
            Stock().remove("bolt")

    def test_add_nothing(self):
        with self.assertRaises(ValueError):
            Stock().add("bolt", 0)

    def test_low_stock(self):
        self.assertEqual(Stock({"a": 5, "b": 6, "c": 0}).low_stock(), ["a", "c"])

    def test_stocks_are_separate(self):
        one, two = Stock(), Stock()
        one.add("nut")
        self.assertEqual(two.counts, {})
""",
    "tests/test_orders.py": """import unittest

from inventory.orders import can_fill, fill, new_stock, restock_list


class OrdersTest(unittest.TestCase):
    def test_fill(self):
        s = new_stock({"a": 4, "b": 2})
        self.assertTrue(fill(s, {"a": 4, "b": 1}))
        self.assertEqual(s.counts, {"a": 0, "b": 1})

    def test_cannot_fill(self):
        s = new_stock({"a": 4, "b": 2})
        self.assertFalse(fill(s, {"a": 1, "b": 3}))
        self.assertEqual(s.counts, {"a": 4, "b": 2})

    def test_can_fill_exactly(self):
        self.assertTrue(can_fill(new_stock({"a": 2}), {"a": 2}))

    def test_restock(self):
        self.assertEqual(restock_list(new_stock({"a": 1, "b": 9, "c": 5})), [("a", 9), ("c", 5)])
""",
}

THERMO = {
    "README.md": "# thermo\n\nTemperature conversions, readings and daily summaries.\n\n"
    "Run the tests: `python3 -m unittest discover -s tests`\n",
    "thermo/__init__.py": '"""Temperatures."""\n',
    "thermo/convert.py": '''"""Temperature conversions."""

ABSOLUTE_ZERO_C = -273.15


def c_to_f(c):
    return c * 9 / 5 + 32


def f_to_c(f):
    return (f - 32) * 5 / 9


def c_to_k(c):
    if c < ABSOLUTE_ZERO_C:
        raise ValueError("below absolute zero")
    return c - ABSOLUTE_ZERO_C
''',
    "thermo/parse.py": '''"""Readings like '21.5C', '70F', '300K' -> degrees Celsius."""

from thermo.convert import ABSOLUTE_ZERO_C, f_to_c


def parse(reading):
    text = reading.strip().upper()
    value, unit = float(text[:-1]), text[-1]
    if unit == "C":
        return value
    if unit == "F":
        return f_to_c(value)
    if unit == "K":
        return value + ABSOLUTE_ZERO_C
    raise ValueError(f"unknown unit in {reading!r}")
''',
    "thermo/summary.py": '''"""Daily summaries of readings."""

from thermo.parse import parse


def daily_range(readings):
    """(lowest, highest) in Celsius, rounded to one decimal."""
    values = [parse(r) for r in readings]
    return round(min(values), 1), round(max(values), 1)


def above(readings, threshold=25.0):
    """How many readings are strictly above `threshold` degrees Celsius."""
    return sum(1 for r in readings if parse(r) > threshold)
''',
    "tests/test_convert.py": """import unittest

from thermo.convert import c_to_f, c_to_k, f_to_c


class ConvertTest(unittest.TestCase):
    def test_fahrenheit(self):
        self.assertEqual(c_to_f(100), 212)
        self.assertEqual(f_to_c(212), 100)

    def test_kelvin(self):
        self.assertAlmostEqual(c_to_k(0), 273.15)
        with self.assertRaises(ValueError):
            c_to_k(-300)
""",
    "tests/test_parse.py": """import unittest

from thermo.parse import parse


class ParseTest(unittest.TestCase):
    def test_units(self):
        self.assertEqual(parse("21.5C"), 21.5)
        self.assertAlmostEqual(parse("273.15K"), 0)

    def test_lower_case_and_spaces(self):
        self.assertEqual(parse(" 212f "), 100)

    def test_unknown_unit(self):
        with self.assertRaises(ValueError):
            parse("10X")
""",
    "tests/test_summary.py": """import unittest

from thermo.summary import above, daily_range


class SummaryTest(unittest.TestCase):
    def test_range(self):
        self.assertEqual(daily_range(["10C", "50F", "300K"]), (10.0, 26.9))

    def test_above(self):
        self.assertEqual(above(["30C", "25C", "80F"]), 2)
        self.assertEqual(above(["30C"], threshold=30), 0)
""",
}

REPOS = {
    "pager": PAGER,
    "invoice": INVOICE,
    "textkit": TEXTKIT,
    "grades": GRADES,
    "inventory": INVENTORY,
    "thermo": THERMO,
}

# (repository, family, tier, [(path, correct snippet, broken snippet), ...]).
# Tier 1: one broken line, in the module whose own test fails. Tier 2: the failures show in
# tests of other modules too, or the fix is more than a changed operator. Tier 3: two bugs
# in two files. Train and held-out splits are disjoint by family (`HELDOUT_FAMILIES`).
BUGS = [
    # off-by-one
    ("pager", "off-by-one", 1, [("pager/pages.py", "start = (number - 1) * per_page", "start = number * per_page")]),
    ("pager", "off-by-one", 1, [("pager/links.py", "number + width) + 1))", "number + width)))")]),
    ("textkit", "off-by-one", 1, [("textkit/wrap.py", "len(word) <= width", "len(word) < width")]),
    (
        "grades",
        "off-by-one",
        1,
        [
            (
                "grades/stats.py",
                "(ordered[middle - 1] + ordered[middle]) / 2",
                "(ordered[middle] + ordered[middle + 1]) / 2",
            )
        ],
    ),
    ("inventory", "off-by-one", 1, [("inventory/stock.py", "if count <= self.low", "if count < self.low")]),
    (
        "pager",
        "off-by-one",
        2,
        [("pager/pages.py", "return math.ceil(total / per_page)", "return total // per_page + 1")],
    ),
    # wrong operator
    ("invoice", "wrong-operator", 2, [("invoice/lines.py", "return quantity * price", "return quantity + price")]),
    ("grades", "wrong-operator", 1, [("grades/letters.py", "if percent >= threshold:", "if percent > threshold:")]),
    ("inventory", "wrong-operator", 1, [("inventory/orders.py", "get(name, 0) >= n", "get(name, 0) > n")]),
    ("thermo", "wrong-operator", 2, [("thermo/convert.py", "return (f - 32) * 5 / 9", "return (f + 32) * 5 / 9")]),
    # missing import
    ("pager", "missing-import", 1, [("pager/pages.py", "import math\n\n", "")]),
    ("textkit", "missing-import", 1, [("textkit/slug.py", "from textkit.words import words\n\n\n", "")]),
    ("inventory", "missing-import", 1, [("inventory/orders.py", "from inventory.stock import Stock\n\n\n", "")]),
    (
        "thermo",
        "missing-import",
        2,
        [("thermo/parse.py", "import ABSOLUTE_ZERO_C, f_to_c", "import f_to_c")],
    ),
    (
        "invoice",
        "missing-import",
        2,
        [("invoice/money.py", "from decimal import ROUND_HALF_UP, Decimal", "from decimal import ROUND_HALF_UP")],
    ),
    # wrong default
    ("pager", "wrong-default", 1, [("pager/pages.py", "DEFAULT_PER_PAGE = 10", "DEFAULT_PER_PAGE = 20")]),
    ("invoice", "wrong-default", 1, [("invoice/money.py", 'currency="EUR"', 'currency="USD"')]),
    ("textkit", "wrong-default", 1, [("textkit/slug.py", "max_words=8", "max_words=5")]),
    ("thermo", "wrong-default", 1, [("thermo/summary.py", "threshold=25.0", "threshold=20.0")]),
    (
        "inventory",
        "wrong-default",
        2,
        [
            (
                "inventory/stock.py",
                "def __init__(self, counts=None, low=5):\n        self.counts = dict(counts or {})",
                "def __init__(self, counts={}, low=5):\n        self.counts = counts",
            )
        ],
    ),
    # missing return
    ("textkit", "missing-return", 1, [("textkit/words.py", "    return ranked[:n]", "    ranked[:n]")]),
    (
        "inventory",
        "missing-return",
        1,
        [("inventory/orders.py", "        stock.remove(name, n)\n    return True", "        stock.remove(name, n)")],
    ),
    ("grades", "missing-return", 1, [("grades/stats.py", "        return ordered[middle]", "        ordered[middle]")]),
    ("invoice", "missing-return", 2, [("invoice/totals.py", "    return sum(line_total", "    sum(line_total")]),
    # two bugs in two files (train)
    (
        "grades",
        "multi-file",
        3,
        [
            ("grades/letters.py", '(80, "B")', '(85, "B")'),
            ("grades/stats.py", "return sum(scores) / len(scores)", "return sum(scores) / (len(scores) + 1)"),
        ],
    ),
    (
        "thermo",
        "multi-file",
        3,
        [
            ("thermo/convert.py", "return c * 9 / 5 + 32", "return c * 5 / 9 + 32"),
            ("thermo/summary.py", "round(max(values), 1)", "round(max(values))"),
        ],
    ),
    (
        "pager",
        "multi-file",
        3,
        [
            ("pager/pages.py", "start : start + per_page", "start : start + per_page - 1"),
            ("pager/links.py", "if number < last else None", "if number <= last else None"),
        ],
    ),
    # held out: an unhandled edge case
    (
        "pager",
        "edge-case",
        1,
        [("pager/pages.py", '    if number < 1:\n        raise ValueError("pages count from 1")\n', "")],
    ),
    (
        "textkit",
        "edge-case",
        1,
        [("textkit/wrap.py", "    if current:\n        lines.append(current)", "    lines.append(current)")],
    ),
    (
        "grades",
        "edge-case",
        1,
        [
            (
                "grades/stats.py",
                'def mean(scores):\n    if not scores:\n        raise ValueError("no scores")\n',
                "def mean(scores):\n",
            )
        ],
    ),
    (
        "invoice",
        "edge-case",
        1,
        [
            (
                "invoice/money.py",
                '    sign = "-" if cents < 0 else ""\n    cents = abs(cents)\n    return f"{sign}{cents',
                '    sign = ""\n    return f"{sign}{cents',
            )
        ],
    ),
    ("thermo", "edge-case", 2, [("thermo/parse.py", "text = reading.strip().upper()", "text = reading")]),
    (
        "inventory",
        "edge-case",
        2,
        [("inventory/orders.py", "    if not can_fill(stock, order):\n        return False\n", "")],
    ),
    # held out: arguments or results swapped
    ("pager", "swapped-arguments", 1, [("pager/links.py", "return previous, following", "return following, previous")]),
    (
        "grades",
        "swapped-arguments",
        1,
        [("grades/report.py", "mean(scores) * 100 / maximum", "mean(scores) * maximum / 100")],
    ),
    (
        "thermo",
        "swapped-arguments",
        1,
        [
            (
                "thermo/summary.py",
                "round(min(values), 1), round(max(values), 1)",
                "round(max(values), 1), round(min(values), 1)",
            )
        ],
    ),
    (
        "invoice",
        "swapped-arguments",
        2,
        [("invoice/totals.py", "discount(subtotal(lines), percent)", "discount(percent, subtotal(lines))")],
    ),
    # held out, tier 3: an edge case unhandled in two files
    (
        "textkit",
        "edge-case",
        3,
        [
            ("textkit/wrap.py", "    if current:\n        lines.append(current)", "    lines.append(current)"),
            (
                "textkit/words.py",
                "    ranked = sorted(counts, key=lambda w: (-counts[w], w))",
                "    ranked = sorted(counts, key=lambda w: -counts[w])",
            ),
        ],
    ),
    (
        "grades",
        "swapped-arguments",
        3,
        [
            ("grades/letters.py", "for threshold, name in bands:", "for name, threshold in bands:"),
            ("grades/report.py", "mean(scores) * 100 / maximum", "mean(scores) * maximum / 100"),
        ],
    ),
    # more held out, added after the rows above (their ids stay as they were)
    (
        "thermo",
        "edge-case",
        1,
        [("thermo/parse.py", '    raise ValueError(f"unknown unit in {reading!r}")', "    return value")],
    ),
    (
        "inventory",
        "edge-case",
        1,
        [("inventory/stock.py", "have = self.counts.get(name, 0)", "have = self.counts[name]")],
    ),
    (
        "invoice",
        "edge-case",
        2,
        [("invoice/money.py", ".quantize(Decimal(1), rounding=ROUND_HALF_UP)", ".quantize(Decimal(1))")],
    ),
    (
        "pager",
        "swapped-arguments",
        2,
        [("pager/pages.py", "math.ceil(total / per_page)", "math.ceil(per_page / total)")],
    ),
    (
        "inventory",
        "swapped-arguments",
        1,
        [("inventory/orders.py", "(name, target - stock.counts[name])", "(name, stock.counts[name] - target)")],
    ),
    (
        "pager",
        "edge-case",
        3,
        [
            ("pager/pages.py", '    if number < 1:\n        raise ValueError("pages count from 1")\n', ""),
            ("pager/links.py", "range(max(1, number - width), ", "range(number - width, "),
        ],
    ),
    (
        "inventory",
        "swapped-arguments",
        3,
        [
            ("inventory/stock.py", "self.counts[name] = have - n", "self.counts[name] = n - have"),
            ("inventory/orders.py", "(name, target - stock.counts[name])", "(name, stock.counts[name] - target)"),
        ],
    ),
    (
        "thermo",
        "edge-case",
        3,
        [
            ("thermo/parse.py", "text = reading.strip().upper()", "text = reading.strip()"),
            ("thermo/convert.py", '    if c < ABSOLUTE_ZERO_C:\n        raise ValueError("below absolute zero")\n', ""),
        ],
    ),
    (
        "invoice",
        "swapped-arguments",
        3,
        [
            ("invoice/totals.py", "discount(subtotal(lines), percent)", "discount(percent, subtotal(lines))"),
            ("invoice/lines.py", "description, quantity, price = (part", "description, price, quantity = (part"),
        ],
    ),
    # more two-file bugs to train on
    (
        "invoice",
        "multi-file",
        3,
        [
            ("invoice/money.py", "{cents % 100:02d}", "{cents % 100}"),
            ("invoice/totals.py", "return net + net * tax_percent // 100", "return net - net * tax_percent // 100"),
        ],
    ),
    (
        "textkit",
        "multi-file",
        3,
        [
            ("textkit/words.py", "return len(words(text))", "return len(words(text)) - 1"),
            ("textkit/slug.py", "words(title)[:max_words]", "words(title)[: max_words - 1]"),
        ],
    ),
    (
        "inventory",
        "multi-file",
        3,
        [
            ("inventory/stock.py", "if n <= 0:", "if n < 0:"),
            ("inventory/orders.py", "get(name, 0) >= n", "get(name, 0) > n"),
        ],
    ),
]

HELDOUT_FAMILIES = ("edge-case", "swapped-arguments")
