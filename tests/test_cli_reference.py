"""The CLI against docs/reference.md: every command and every flag is in its CLI table, and the
page names no command or flag that does not exist; retired spellings are one line naming the
new one; the cli/ modules stay small."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tempering.cli import app
from tempering.cli.agent import TrainByDefault

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference.md"
FLAG = re.compile(r"(?<![\w/.=-])(--?[A-Za-z][\w-]*)")
CODE = re.compile(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", re.S)
# flags of other programs that the page shows (torchrun's)
FOREIGN = {"--standalone", "--nproc_per_node", "-m"}


def command_tree() -> dict[tuple[str, ...], Any]:
    """Every command and group by its words after `temper` (the root is ())."""
    tree: dict[tuple[str, ...], Any] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        tree[path] = command
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return tree


def options(command: Any) -> list[set[str]]:
    """The spellings of each visible option of a command (`--help` aside)."""
    found = []
    for p in command.params:
        if p.param_type_name == "option" and not p.hidden and "--help" not in p.opts:
            found.append(set(p.opts) | set(p.secondary_opts))
    return found


def spellings(command: Any) -> set[str]:
    """Every option spelling a command answers to, retired ones (hidden: a one-line error) too."""
    named = [set(p.opts) | set(p.secondary_opts) for p in command.params if p.param_type_name == "option"]
    return set().union(*named) | {"--help"}


def resolve(words: list[str], tree: dict[tuple[str, ...], Any]) -> tuple[str, ...]:
    """The longest command path at the start of `words` (after `temper`); a group that trains by
    default (`temper agent CONFIG` is `temper agent train CONFIG`) stands for its `train`."""
    path: tuple[str, ...] = ()
    for word in words:
        if (*path, word) not in tree:
            break
        path = (*path, word)
    if isinstance(tree[path], TrainByDefault):
        return (*path, "train")
    return path


def cli_rows(text: str) -> list[str]:
    """The first cell of every row of the table under `## CLI`."""
    section = text.split("\n## CLI\n", 1)[1].split("\n### ", 1)[0]
    rows = []
    for line in section.splitlines():
        if line.startswith("| `"):
            cell = re.split(r"(?<!\\)\|", line)[1].strip()
            rows.append(cell.strip("`").replace("\\|", "|"))
    return rows


def temper_spans(text: str) -> list[str]:
    """Every code span, and every line of a code block, that runs `temper`."""
    spans = []
    for block, span in CODE.findall(text):
        for line in block.splitlines() if block else [span]:
            line = line.strip().removeprefix("$ ")
            if line.startswith("temper ") or line == "temper":
                spans.append(line.split("#", 1)[0].replace("\\|", "|"))
    return spans


def span_problems(text: str, tree: dict[tuple[str, ...], Any]) -> list[str]:
    """The `temper ...` spans of a page that name a command or a flag that does not exist (a
    retired spelling exists: it is a one-line error naming the new one)."""
    found = []
    for span in temper_spans(text):
        words = span.split(" -- ", 1)[0].split()[1:]  # after `--`: the program's own arguments
        path = resolve(words, tree)
        rest = words[len(path) : len(path) + 1]
        retired = getattr(tree[path], "retired", {})
        if hasattr(tree[path], "commands") and rest and re.fullmatch(r"[a-z][a-z0-9_-]*", rest[0]):
            if rest[0] not in retired:
                found.append(f"`{span}`: no command `temper {' '.join((*path, rest[0]))}`")
            continue
        for flag in sorted(set(FLAG.findall(" ".join(words))) - spellings(tree[path])):
            found.append(f"`{span}`: `temper {' '.join(path)}` has no flag {flag}")
    return found


def problems(text: str) -> list[str]:
    """What docs/reference.md gets wrong about the CLI, one line each."""
    tree = command_tree()
    found: list[str] = []
    documented: dict[tuple[str, ...], str] = {}
    for cell in cli_rows(text):
        if not cell.startswith("temper"):
            continue
        words = re.split(r"[\s\[\]|]+", cell)[1:]
        path = resolve([w for w in words if w], tree)
        command = tree[path]
        if path in documented:
            found.append(f"`temper {' '.join(path)}` has two rows")
        documented[path] = cell
        named = set(FLAG.findall(cell))
        for flag in sorted(named - {s for option in options(command) for s in option} - {"--help"}):
            found.append(f"row `temper {' '.join(path)}`: no flag {flag}")
        for option in options(command):
            if not option & named:
                found.append(f"row `temper {' '.join(path)}`: {sorted(option)[0]} is not documented")
    for path, command in tree.items():
        if not hasattr(command, "commands") and path not in documented:
            found.append(f"`temper {' '.join(path)}` has no row in the CLI table")
    found += span_problems(text, tree)
    every = set().union(*(spellings(c) for c in tree.values())) | FOREIGN
    for flag in sorted(set(FLAG.findall(text)) - every):
        if flag.startswith("--"):
            found.append(f"{flag} is no flag of any command")
    return found


def test_reference_documents_every_command_and_flag_and_nothing_else():
    assert problems(REFERENCE.read_text()) == []


def test_the_check_catches_a_missing_flag_a_made_up_flag_and_a_made_up_command():
    text = REFERENCE.read_text()
    assert problems(text) == []
    dropped = text.replace(r" [--worst\|--best\|--flagged]", r" [--worst\|--best]", 1)
    assert dropped != text
    assert problems(dropped) == ["row `temper traj`: --flagged is not documented"]
    made_up = text.replace(" [--json]", " [--json] [--jsonl]", 1)
    assert "row `temper traj`: no flag --jsonl" in problems(made_up)
    assert "--jsonl is no flag of any command" in problems(made_up)
    extra = text + "\nRun `temper runs list` to see them.\n"
    assert problems(extra) == ["`temper runs list`: no command `temper runs list`"]


def test_every_page_names_only_commands_and_flags_that_exist():
    tree = command_tree()
    pages = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", ROOT / "bench" / "README.md"]
    found = {str(p.relative_to(ROOT)): span_problems(p.read_text(), tree) for p in pages}
    assert {page: bad for page, bad in found.items() if bad} == {}


RETIRED = [
    (["serve", "--tinker"], "--tinker is now its own command, `temper tinker serve`"),
    (["keys", "list"], "`temper keys list` is now `temper keys ls`"),
    (["vision_sft", "c.yaml"], "`temper vision_sft` is now `temper vision-sft`"),
    (["data", "mix", "m.yaml", "--output", "x.jsonl"], "--output is now --out"),
    (["data", "dedup", "d.jsonl", "-o", "o.jsonl", "--runs", "r"], "--runs is now --root"),
    (["data", "decontam", "d.jsonl", "--against", "s", "--runs", "r"], "--runs is now --root"),
    (["data", "pairs", "--runs", "r"], "--runs is now --root"),
    (["data", "pairs", "--source", "builtin:arithmetic"], "--source is now --tasks"),
]


@pytest.mark.parametrize("args,message", RETIRED, ids=[" ".join(a[:3]) for a, _ in RETIRED])
def test_a_retired_spelling_is_one_line_naming_the_new_one(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(app, args)
    assert (res.exit_code, res.stderr.strip()) == (2, f"error: {message}"), res.output
    assert list(tmp_path.iterdir()) == []


def test_one_word_style_per_name():
    """Command names join words with `-` (as `best-of-n`, `gguf-converter`); listing is `ls`
    wherever a group lists; `--out` also answers to `-o`; `--force` has no `--no-force`."""
    tree = command_tree()
    for path, command in tree.items():
        assert all("_" not in word for word in path), path
        assert "list" not in path, path
        for option in options(command):
            if "--out" in option:
                assert "-o" in option, path
            assert "--no-force" not in option, path


def test_cli_modules_stay_small():
    """STYLE.md: modules well under ~500 lines (cli/runs.py held seven commands in 546)."""
    sizes = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "src" / "tempering" / "cli").glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 450} == {}
