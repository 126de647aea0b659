"""Contamination scan: planted copies of suite tasks are found, named and removed."""

import json

import pytest

from tempering.evals.contamination import TRAINING_TEXT_FIELDS, NgramIndex, decontaminate, normalize

LONG_TASK = (
    "A farmer has three fields of wheat and each field yields forty bushels in a good year "
    "while a bad year halves the yield; how many bushels does the farmer expect over two years?"
)
SHORT_TASK = "What is 12+5?"
PRIVATE_TASK = (
    "The lighthouse keeper Ormsby logged seventeen zeppelins crossing the northern estuary "
    "before the tide tables were rewritten by the harbour council in secret."
)


def chat(user: str, assistant: str = "Let me think.", **extra) -> dict:
    return {**extra, "messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


CLEAN_ROWS = [
    chat("Write a haiku about autumn leaves falling in a quiet park at dusk.", "Leaves drift..."),
    chat("What is 12-5?", "7"),  # differs from SHORT_TASK only by the operator
    chat("What is 12+50?", "62"),
    chat("A farmer has three fields of corn.", "Nice."),  # shares fewer than 13 words in a row
    {"prompt": "Explain photosynthesis briefly.", "completion": "Plants turn light into sugar."},
    "Plain text about the weather in Lisbon during the spring months.",
]


def planted_rows() -> list:
    return [
        chat(LONG_TASK, "80 + 40 ... = 120", id="exact"),
        chat(LONG_TASK.upper(), "120", id="upper"),
        chat(
            "  a farmer HAS three fields of wheat, and each field yields forty bushels -- in a good year;\n"
            "while a bad year halves the yield.   How many bushels?",
            id="spacing",
        ),
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {
                    "role": "user",
                    "content": "Here is a homework problem my teacher gave us yesterday: "
                    + LONG_TASK
                    + " Please help, I am stuck.",
                },
                {"role": "assistant", "content": "Sure."},
            ]
        },  # no id: named by path:line
        chat("ok", "Quiz answer key. Q1: what is 12 + 5 ? A: 17"),  # short task inside an assistant turn
        {"prompt": PRIVATE_TASK, "completion": "A story.", "id": "private-copy"},
    ]


@pytest.fixture
def index() -> NgramIndex:
    idx = NgramIndex(n=13)
    idx.add_tasks(
        "reasoning",
        [
            {
                "id": "farm-1",
                "messages": [
                    {"role": "system", "content": "Answer with a number and nothing else please."},
                    {"role": "user", "content": LONG_TASK},
                ],
            },
            {"id": "add-7", "prompt": SHORT_TASK},
        ],
    )
    idx.add_tasks("heldout", [{"id": "ho-3", "prompt": PRIVATE_TASK}], private=True)
    return idx


def write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_normalize_drops_case_punctuation_and_spacing_but_keeps_operators():
    assert normalize("  Hello,   WORLD!\n") == ["hello", "world"]
    assert normalize("What is 12+5?") == normalize("what is 12 + 5") == ["what", "is", "12", "+", "5"]
    assert normalize("12-5") != normalize("12+5")
    assert normalize("well-known state-of-the-art") == ["well", "known", "state", "of", "the", "art"]
    assert normalize("**Bold** -- a dash, 50% off, 2*3 = -6") == [
        "bold",
        "a",
        "dash",
        "50",
        "%",
        "off",
        "2",
        "*",
        "3",
        "=",
        "-",
        "6",
    ]


def test_planted_overlaps_are_found_with_row_ids_and_counts(index, tmp_path):
    path = tmp_path / "train.jsonl"
    write_jsonl(path, planted_rows())
    hits = {h.row_id: h for h in index.scan_file(path).hits}
    assert sorted(hits) == sorted(["exact", "upper", "spacing", f"{path}:4", f"{path}:5", "private-copy"])
    farm_grams = len(normalize(LONG_TASK)) - 13 + 1  # every 13-gram of the task
    for row_id in ("exact", "upper", f"{path}:4"):
        (m,) = hits[row_id].matches
        assert (m.suite, m.task_id, m.ngrams, m.private) == ("reasoning", "farm-1", farm_grams, False)
    # "spacing" keeps the first 27 words of the task ("... the yield how many bushels"): 27 - 13 + 1 = 15.
    assert [(m.task_id, m.ngrams) for m in hits["spacing"].matches] == [("farm-1", 15)]
    (short,) = hits[f"{path}:5"].matches
    assert (short.task_id, short.ngrams, short.example) == ("add-7", 1, "what is 12 + 5")
    (secret,) = hits["private-copy"].matches
    assert (secret.suite, secret.task_id, secret.private, secret.example) == ("heldout", "ho-3", True, None)


def test_in_memory_scan_names_rows_without_id_by_position(index):
    hits = index.scan([CLEAN_ROWS[0], chat(LONG_TASK)], source="batch")
    assert [h.row_id for h in hits] == ["batch:2"]


def test_clean_dataset_reports_nothing(index, tmp_path):
    path = tmp_path / "clean.jsonl"
    write_jsonl(path, CLEAN_ROWS)
    scan = index.scan_file(path)
    assert (scan.rows, scan.hits, scan.errors) == (6, [], [])
    report = decontaminate(index, path, tmp_path / "out.jsonl")
    assert (report.kept, report.removed, report.removed_ids, report.by_suite) == (6, 0, [], {})


def test_decontaminate_removes_exactly_the_planted_rows(index, tmp_path):
    rows = CLEAN_ROWS[:3] + planted_rows() + CLEAN_ROWS[3:]
    src, out = tmp_path / "mixed.jsonl", tmp_path / "clean" / "mixed.jsonl"
    write_jsonl(src, rows)
    report = decontaminate(index, src, out)
    assert report.kept == len(CLEAN_ROWS) and report.removed == 6
    assert report.removed_ids == ["exact", "upper", "spacing", f"{src}:7", f"{src}:8", "private-copy"]
    assert report.by_suite == {"reasoning": 5, "heldout": 1}
    assert [json.loads(line) for line in out.read_text().splitlines()] == CLEAN_ROWS
    assert not list(out.parent.glob("*.tmp"))  # no temp file left beside the output


def test_private_suite_text_never_appears_in_reports(index, tmp_path):
    src = tmp_path / "leak.jsonl"
    write_jsonl(src, planted_rows())
    report = decontaminate(index, src, tmp_path / "out.jsonl")
    dumped = json.dumps(report.to_dict()).lower()
    assert "ho-3" in dumped and "heldout" in dumped  # ids and names are reported
    private_words = set(normalize(PRIVATE_TASK)) - set(normalize(LONG_TASK)) - {"the", "by", "in", "before"}
    assert not [w for w in private_words if w in dumped]
    assert "wheat" in dumped  # public suites do show an example of what matched


def test_a_scan_quarantines_unreadable_rows_with_file_line_and_reason(index, tmp_path):
    src = tmp_path / "bad.jsonl"
    rows = [CLEAN_ROWS[0], chat(LONG_TASK, id="leak")]
    src.write_text(
        json.dumps(rows[0]) + "\n{oops\n" + json.dumps({"id": "x", "label": 3}) + "\n" + json.dumps(rows[1]) + "\n"
    )
    scan = index.scan_file(src)
    assert scan.rows == 4 and [h.row_id for h in scan.hits] == ["leak"]  # rows after the bad ones still scanned
    assert [str(e) for e in scan.errors] == [
        f"{src}:2: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{src}:3: no text to check (expected one of {', '.join(TRAINING_TEXT_FIELDS)})",
    ]


def test_decontaminate_quarantines_bad_rows_and_writes_atomically_with_a_checksum(index, tmp_path):
    import hashlib

    src = tmp_path / "bad.jsonl"
    src.write_text(
        json.dumps(CLEAN_ROWS[0])
        + "\n{oops\n"
        + json.dumps({"id": "x", "label": 3})
        + "\n"
        + json.dumps(chat(LONG_TASK, id="leak"))
        + "\n"
    )
    out = tmp_path / "out.jsonl"
    report = decontaminate(index, src, out)
    assert (report.rows, report.kept, report.removed, report.quarantined) == (4, 1, 1, 2)
    assert [str(e) for e in report.errors] == [
        f"{src}:2: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
        f"{src}:3: no text to check (expected one of messages, prompt, "
        "text, completion, response, chosen, rejected, conversations, "
        "instruction, input, output)",
    ]
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert report.sha256 == digest
    assert (tmp_path / "out.jsonl.sha256").read_text() == f"{digest}  out.jsonl\n"
    assert not list(tmp_path.glob("*.tmp"))
    with pytest.raises(ValueError, match="'farm-1' indexed twice"):
        index.add("reasoning", "farm-1", "another text")
    with pytest.raises(ValueError, match="both as private and as public"):
        index.add("heldout", "ho-4", "some public text")
    with pytest.raises(ValueError, match="no words"):
        index.add("reasoning", "empty", "?!")


def test_suite_file_is_indexed_with_line_numbers(tmp_path):
    suite = tmp_path / "suite.jsonl"
    write_jsonl(suite, [{"id": "a", "prompt": SHORT_TASK}, {"prompt": "no id here"}])
    with pytest.raises(ValueError, match=r"suite.jsonl:2: suite 'arith': task 1 has no 'id'"):
        NgramIndex().add_file("arith", suite)
    write_jsonl(suite, [{"id": "a", "prompt": SHORT_TASK}])
    idx = NgramIndex()
    assert idx.add_file("arith", suite) == 1 and len(idx) == 1 and idx.suites == {"arith": False}


HEADER = "Read the question below carefully and answer it with a single number only and show no working at all."
QUESTIONS = [
    "How many apples are left when Maria gives away seven of the twenty she picked in the orchard on Sunday?",
    "A train leaves the station at noon travelling sixty miles each hour; how far has it gone by three o'clock?",
    "If a rectangle is nine metres long and four metres wide, what is its area in square metres exactly?",
]
NOTICE = (
    "This material is provided for educational purposes only and may be freely copied and shared provided "
    "that this notice is kept intact."
)


@pytest.fixture
def boiler_index() -> NgramIndex:
    idx = NgramIndex(n=13)
    idx.add_tasks("word", [{"id": f"q{i}", "prompt": HEADER + " " + q} for i, q in enumerate(QUESTIONS)])
    idx.add_tasks("notice", [{"id": "n1", "prompt": QUESTIONS[0].replace("apples", "pears") + " " + NOTICE}])
    return idx


def test_a_header_every_task_shares_is_boilerplate_and_flags_nothing(boiler_index):
    # the header alone has 19 words: 7 grams, each in all three "word" tasks (>= 3): not indexed
    assert boiler_index.boilerplate_grams == 7
    assert boiler_index.matches({"text": HEADER + " Then write a poem about the sea and the sky at night."}) == ()
    # a task is indexed by its own text: the grams straddling the header go with it
    for row in (HEADER + " " + QUESTIONS[1], QUESTIONS[1]):
        (m,) = boiler_index.matches({"text": "Homework: " + row + " Thanks!"})
        assert m.task_id == "q1" and m.ngrams == len(normalize(QUESTIONS[1])) - 12


def test_a_phrase_one_task_quotes_is_below_the_coverage_rule(boiler_index):
    # "n1" = 20-word question + 22-word notice: 30 grams; the notice alone holds 10 of them (< 50%)
    task_grams = len(normalize(QUESTIONS[0] + " " + NOTICE)) - 12
    assert task_grams == 30
    assert boiler_index.matches({"text": "Some unrelated story. " + NOTICE}) == ()
    found = boiler_index.matches({"text": QUESTIONS[0].replace("apples", "pears") + " " + NOTICE})
    # n1 itself; and q0's question with one word changed: 5 of q0's 8 own grams (its header is boilerplate)
    assert [(m.task_id, m.ngrams) for m in found] == [("q0", 5), ("n1", 30)]
    strict = NgramIndex(n=13, min_coverage=0.3)  # a lower bar takes the notice for the task
    strict.add("notice", "n1", QUESTIONS[0].replace("apples", "pears") + " " + NOTICE)
    assert [m.task_id for m in strict.matches({"text": NOTICE})] == ["n1"]


def test_rewrapped_recased_and_embedded_copies_are_found(boiler_index):
    text = HEADER + " " + QUESTIONS[2]
    words = text.split()
    rewrapped = "\n".join(" ".join(words[i : i + 8]) for i in range(0, len(words), 8))
    recased = " ".join(w.upper().strip("?,.") + ";" for w in words).replace("NINE", "nine")
    embedded = "Notes from class.\n\n" + rewrapped + "\n\nThe end of the notes, see you tomorrow in the lab."
    for row in (rewrapped, recased, embedded, {"messages": [{"role": "assistant", "content": recased}]}):
        assert [m.task_id for m in boiler_index.matches(row)] == ["q2"]


def test_bad_index_settings_are_refused():
    with pytest.raises(ValueError, match="min_coverage must be in"):
        NgramIndex(min_coverage=0.0)
    with pytest.raises(ValueError, match="boilerplate_tasks must be >= 2"):
        NgramIndex(boilerplate_tasks=1)


def test_parquet_is_streamed_by_batch(index, tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import tempering.data.streams as streams

    monkeypatch.setattr(streams, "PARQUET_BATCH", 2)
    rows = [{"id": f"r{i}", "prompt": LONG_TASK if i == 3 else f"clean row number {i}"} for i in range(5)]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)
    report = decontaminate(index, path, tmp_path / "out.jsonl")
    assert (report.rows, report.removed_ids) == (5, ["r3"])
    assert [e["id"] for e in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())] == [
        "r0",
        "r1",
        "r2",
        "r4",
    ]


def test_labelled_set_recall_and_precision_per_kind_at_least_095(tmp_path):
    from tests.data.test_dedup import load_bench

    bench = load_bench()
    result = bench.bench_decontam(60, 40, 300, tmp_path)
    for kind in bench.KINDS:
        assert result[f"decontam_recall_{kind}"] >= 0.95, kind
        assert result[f"decontam_recall_{kind}_short"] == 1.0, kind  # short questions, with or without the header
        assert result[f"decontam_precision_{kind}"] >= 0.95, kind
    assert result["decontam_precision"] >= 0.95 and result["decontam_right_task"] >= 0.95
    # the hard negatives are hard: the plain any-gram rule takes the shared header and the notice for tasks
    assert result["decontam_false_positives_without_guards"] >= 40


def test_streamed_rows_with_planted_contamination_are_all_found(tmp_path):
    from tests.data.test_dedup import load_bench

    bench = load_bench()
    tasks = bench.suite_tasks(50)
    public, private = bench.write_suite(tasks, tmp_path)
    planted = bench.write_scale_file(tmp_path / "rows.jsonl", 3000, tasks, every=100)
    index = NgramIndex()
    index.add_file("pub", public)
    index.add_file("priv", private, private=True)
    seen = []
    report = decontaminate(index, tmp_path / "rows.jsonl", tmp_path / "kept.jsonl", progress=seen.append)
    assert report.removed_ids == planted and len(planted) == 30
    assert report.kept == 2970 and seen == []  # progress ticks every 10,000 rows


def _rewrapped(text: str) -> str:
    words = text.split()
    return "\n".join(" ".join(words[i : i + 8]) for i in range(0, len(words), 8))


HUMANEVAL_DISGUISES = {
    "rewrapped": _rewrapped,  # a line break every 8 words
    "reindented": lambda t: "\n".join("        " + line.strip() for line in t.splitlines()),
    "collapsed": lambda t: " ".join(t.split()),
    "wrapped_in_sentences": lambda t: "Here is a task I found online.\n" + t + "\nPlease solve it carefully.",
}


def test_every_humaneval_prompt_is_found_in_every_disguise_without_its_chat_instruction():
    # the shipped suite asks in chat style: every task starts with the same instruction, whose
    # grams are boilerplate; a leaked copy of the bare prompt must still count, short ones too
    # (HumanEval/23 `strlen` is 16 words)
    from tempering.evals.leakage import suite_index
    from tempering.evals.suite import load_suite
    from tempering.sources.humaneval import CHAT_INSTRUCTION, humaneval_problems

    index = suite_index([load_suite("humaneval")])
    problems = humaneval_problems()
    assert index.boilerplate_grams > 0 and len(index) == 164
    for kind, disguise in HUMANEVAL_DISGUISES.items():
        missed = [
            p["task_id"]
            for p in problems
            if p["task_id"] not in {m.task_id for m in index.matches(disguise(p["prompt"]))}
        ]
        assert missed == [], (kind, f"recall {1 - len(missed) / len(problems):.3f}")
    # clean rows: solutions, tests, and the instruction itself around other code, match nothing
    clean = [p["canonical_solution"] for p in problems] + [p["test"] for p in problems]
    clean += [CHAT_INSTRUCTION.format(prompt=p["canonical_solution"]) for p in problems]
    assert [row for row in clean if index.matches(row)] == []
