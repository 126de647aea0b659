"""bench/ is split by kind and indexed: every script lives in throughput/, experiments/, diagnostics/,
gpu/ or _shared/ and has a row in bench/README.md; bench, tests and src name claims, not tickets."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("throughput", "experiments", "diagnostics", "gpu")
# Ticket language: "issue 9", "Must show 4", "Must-show 2", "item 12:", "session 7". Pieces are
# joined so that this file does not match itself.
TICKET = re.compile("|".join([r"\bissue \d", r"\bmust[- ]show \d", r"\bitems? \d+(/\d+)?:", r"\bsession[- ]\d"]), re.I)


def unindexed_scripts(bench: Path) -> list[str]:
    """Scripts outside the kind folders, and scripts of a kind folder with no row in README.md."""
    index = (bench / "README.md").read_text()
    stray = [p.name for p in bench.glob("*.py")]
    rows = [
        p.relative_to(bench).as_posix()
        for kind in KINDS
        for p in sorted((bench / kind).glob("*.py"))
        if f"| `{p.relative_to(bench).as_posix()}` |" not in index
    ]
    return stray + rows


def ticket_lines(files) -> list[str]:
    return [
        f"{path}:{n}"
        for path in files
        for n, line in enumerate(Path(path).read_text().splitlines(), 1)
        if TICKET.search(line)
    ]


def test_every_bench_script_is_in_a_kind_folder_and_in_the_index():
    assert unindexed_scripts(ROOT / "bench") == []
    assert all(any((ROOT / "bench" / kind).glob("*.py")) for kind in KINDS)


def test_a_new_bench_script_without_an_index_row_is_caught(tmp_path):
    for kind in KINDS:
        (tmp_path / kind).mkdir()
    (tmp_path / "README.md").write_text("| `throughput/old.py` | `old.json` | a claim | run |\n")
    (tmp_path / "throughput" / "old.py").write_text("")
    (tmp_path / "throughput" / "new.py").write_text("")
    (tmp_path / "loose.py").write_text("")
    assert unindexed_scripts(tmp_path) == ["loose.py", "throughput/new.py"]


def test_bench_tests_and_src_name_the_claim_not_the_ticket():
    files = [p for d in ("bench", "tests", "src") for p in sorted((ROOT / d).rglob("*.py")) if p != Path(__file__)]
    assert ticket_lines(files) == []


def test_ticket_language_is_caught(tmp_path):
    planted = tmp_path / "t.py"
    must, issue = "Must" + " show 4", "iss" + "ue 13"
    planted.write_text(
        f'"""{must} ({issue}): a claim."""\n# item' + ' 12: a finished run\nx = "the data must show it"\n'
    )
    assert ticket_lines([planted]) == [f"{planted}:1", f"{planted}:2"]
