"""Workspace task families closer to a terminal: create, move, configure, inspect logs, and
longer repairs (a log summariser that crashes, helper modules moved into a package).

Each function returns workspace items (`make_envs.py: workspace` adds id, split and tools):
a `kind` (the family), a `variant`, the tier, the starting files, the prompt, the goal and
the scripted expert's `solution`. Each family has its own seed, so adding one leaves the
others' files unchanged.
"""

from __future__ import annotations

import json
import random


def call(name: str, **arguments: str) -> dict:
    return {"name": name, "arguments": arguments}


def _item(kind: str, variant: int, tier: int, files: dict, prompt: str, goal: dict, solution: list, **extra) -> dict:
    return {
        "kind": kind,
        "variant": variant,
        "tier": tier,
        "files": files,
        "prompt": prompt,
        "goal": goal,
        "solution": solution,
        "max_steps": 2 + 2 * tier + len(solution),
        **extra,
    }


# --- tier 1 -----------------------------------------------------------------------------------

CREATE = [
    ("notes/todo.txt", "buy more coffee filters"),
    ("docs/CHANGELOG.md", "# Changelog"),
    ("config/.env", "MODE=production"),
    ("reports/2026/summary.txt", "all checks passed"),
]


def create_file() -> list[dict]:
    """Create a file (and its folders) with one given line."""
    return [
        _item(
            "create-file",
            i,
            1,
            {"README.md": "# project\n"},
            f'Create the file {path} containing exactly the line `{text}`. Then submit "done".',
            {"type": "file", "path": path, "equals": text},
            [[call("write_file", path=path, content=text + "\n")], [call("submit", answer="done")]],
        )
        for i, (path, text) in enumerate(CREATE)
    ]


MOVES = [("draft.txt", "archive"), ("photo.png", "images"), ("old_report.csv", "backup/2025"), ("notes.md", "docs")]


def move_file() -> list[dict]:
    """Move one file into a folder that may not exist yet."""
    rng, items = random.Random(21), []
    for i, (name, folder) in enumerate(MOVES):
        content = f"{name} version {rng.randrange(100, 999)}\n"
        check = f"import os\nassert not os.path.exists({name!r})\nassert os.path.isfile({folder + '/' + name!r})\n"
        items.append(
            _item(
                "move-file",
                i,
                1,
                {name: content, "keep.txt": "stay here\n"},
                f"Move {name} into the folder {folder}/ (create it if needed), keeping its name and content. "
                'Then submit "done".',
                {
                    "type": "all",
                    "checks": [
                        {"type": "script", "files": {"check_moved.py": check}},
                        {"type": "file", "path": f"{folder}/{name}", "equals": content},
                        {"type": "file", "path": "keep.txt", "equals": "stay here"},
                    ],
                },
                [[call("shell", cmd=f"mkdir -p {folder} && mv {name} {folder}/")], [call("submit", answer="done")]],
            )
        )
    return items


# --- tier 2 -----------------------------------------------------------------------------------

APP_PY = """import json

settings = json.load(open("config/settings.json"))
print(f"listening on {settings['host']}:{settings['port']} (debug={settings['debug']}, workers={settings['workers']})")
"""


def configure() -> list[dict]:
    """Change two settings of a JSON config, keep the others, check with the app."""
    rng, items = random.Random(22), []
    for i in range(4):
        before = {"host": "127.0.0.1", "port": rng.randrange(3000, 9000), "debug": True, "workers": rng.randrange(1, 5)}
        before["name"] = ["shop", "blog", "wiki", "chat"][i]
        after = {**before, "port": rng.randrange(9000, 9900), "debug": False}
        text = json.dumps(before, indent=2) + "\n"
        check = (
            f"import json\nwant = {after!r}\ngot = json.load(open('config/settings.json'))\nassert got == want, got\n"
        )
        items.append(
            _item(
                "configure",
                i,
                2,
                {"config/settings.json": text, "app.py": APP_PY},
                f"Configure the app for production: in config/settings.json set port to {after['port']} and turn "
                "debug off (false); leave every other setting as it is. Check with `python3 app.py`, then submit "
                '"done".',
                {"type": "script", "files": {"check_config.py": check}},
                [
                    [call("read_file", path="config/settings.json")],
                    [call("write_file", path="config/settings.json", content=json.dumps(after, indent=2) + "\n")],
                    [call("shell", cmd="python3 app.py")],
                    [call("submit", answer="done")],
                ],
                protected=["app.py"],
            )
        )
    return items


def inspect_logs() -> list[dict]:
    """Questions over several log files: the request with the most errors, how many requests failed."""
    rng, items = random.Random(23), []
    for i in range(4):
        ids = [f"req-{rng.randrange(1000, 9999)}" for _ in range(6)]
        worst = ids[0]
        files = {}
        for k in range(3):
            lines = []
            for m in range(rng.randrange(10, 16)):
                level = rng.choice(["INFO", "INFO", "WARN", "ERROR"])
                rid = worst if (level == "ERROR" and k == m % 3) else rng.choice(ids[1:])
                lines.append(f"2026-03-0{k + 1} 10:{m:02d}:00 {level} [{rid}] event {m}")
            lines += [f"2026-03-0{k + 1} 11:00:00 ERROR [{worst}] retry failed"] * 2
            files[f"logs/app-{k + 1}.log"] = "\n".join(lines) + "\n"
        errors = [line for text in files.values() for line in text.splitlines() if " ERROR " in line]
        if i % 2 == 0:
            counts = {rid: sum(f"[{rid}]" in line for line in errors) for rid in ids}
            answer = max(counts, key=counts.__getitem__)
            assert sorted(counts.values())[-1] > sorted(counts.values())[-2]
            prompt = "Which request id has the most ERROR lines across the log files in logs/? Submit the id (like req-1234)."
            cmd = "grep -h ' ERROR ' logs/*.log | grep -o 'req-[0-9]*' | sort | uniq -c | sort -rn | head -3"
        else:
            answer = str(len({line.split("[")[1].split("]")[0] for line in errors}))
            prompt = "How many different request ids have at least one ERROR line in the log files in logs/? Submit the number."
            cmd = "grep -h ' ERROR ' logs/*.log | grep -o 'req-[0-9]*' | sort -u | wc -l"
        items.append(
            _item(
                "inspect-logs",
                i,
                2,
                files,
                prompt,
                {"type": "answer", "value": answer},
                [
                    [call("shell", cmd="ls logs && head -3 logs/app-1.log")],
                    [call("shell", cmd=cmd)],
                    [call("submit", answer=answer)],
                ],
                protected=sorted(files),
            )
        )
    return items


def organize() -> list[dict]:
    """Sort files into folders by extension, leaving the rest alone."""
    rng, items = random.Random(24), []
    kinds = [("csv", "data"), ("png", "images"), ("log", "logs"), ("md", "docs")]
    for i in range(4):
        (ext_a, dir_a), (ext_b, dir_b) = kinds[i], kinds[(i + 1) % 4]
        names = ["alpha", "beta", "gamma", "delta", "omega"]
        files = {f"{n}.{ext_a}": f"{n}\n" for n in rng.sample(names, rng.randrange(2, 5))}
        files.update({f"{n}.{ext_b}": f"{n}\n" for n in rng.sample(names, rng.randrange(1, 4))})
        files.update({"main.py": "print('hi')\n", "notes.txt": "keep\n"})
        want = {p: (f"{dir_a}/{p}" if p.endswith(ext_a) else f"{dir_b}/{p}" if p.endswith(ext_b) else p) for p in files}
        check = (
            "import os\n"
            f"want = {sorted(want.values())!r}\n"
            "got = sorted(os.path.relpath(os.path.join(d, f)) for d, _, fs in os.walk('.') for f in fs)\n"
            "got = [p for p in got if not p.startswith(('_agent_code', '__pycache__'))]\n"
            "assert got == want, got\n"
        )
        items.append(
            _item(
                "organize",
                i,
                2,
                files,
                f"Tidy up /work: move every .{ext_a} file into {dir_a}/ and every .{ext_b} file into {dir_b}/ "
                '(create the folders); leave all other files where they are. Then submit "done".',
                {"type": "script", "files": {"check_layout.py": check}},
                [
                    [call("shell", cmd="ls")],
                    [call("shell", cmd=f"mkdir -p {dir_a} {dir_b} && mv *.{ext_a} {dir_a}/ && mv *.{ext_b} {dir_b}/")],
                    [call("shell", cmd="ls -R")],
                    [call("submit", answer="done")],
                ],
            )
        )
    return items


# --- tier 3 -----------------------------------------------------------------------------------

SUMMARIZE = '''import json

LEVELS = ("DEBUG", "INFO", "WARN", "ERROR")


def summarize(lines):
    """Events per level; {fix}"""
    counts = {{level: 0 for level in LEVELS}}
    for line in lines:
{body}
    return counts


if __name__ == "__main__":
    counts = summarize(open("{log}").read().splitlines())
    json.dump(counts, open("summary.json", "w"), indent=2)
    print("wrote summary.json")
'''
BROKEN_BODY = '        level, message = line.split(" ", 1)\n        counts[level] += 1'
FIXED_BODY = '        level = line.split(" ", 1)[0]\n        if level in counts:\n            counts[level] += 1'
SUMMARY_TESTS = """import unittest

from summarize import summarize


class T(unittest.TestCase):
    def test_counts(self):
        got = summarize(["INFO a", "ERROR b c", "ERROR d", "WARN e"])
        self.assertEqual(got, {"DEBUG": 0, "INFO": 1, "WARN": 1, "ERROR": 2})

    def test_malformed_lines_are_skipped(self):
        got = summarize(["", "ERROR", "oops", "# comment", "TRACE x", "DEBUG y", "ERROR z"])
        self.assertEqual(got, {"DEBUG": 1, "INFO": 0, "WARN": 0, "ERROR": 2})
"""


def log_pipeline() -> list[dict]:
    """A log summariser that crashes on a malformed line: fix it, run it, report from its output."""
    rng, items = random.Random(25), []
    bad_lines = ["", "---- restart ----", "TRACE entering loop", "ERROR"]
    for i in range(4):
        log = ["service.log", "events.log", "app.log", "worker.log"][i]
        lines = [f"{rng.choice(['DEBUG', 'INFO', 'WARN', 'ERROR'])} event {k}" for k in range(rng.randrange(12, 25))]
        lines.insert(rng.randrange(3, len(lines)), bad_lines[i])
        counts = {
            lvl: sum(line.split(" ", 1)[0] == lvl for line in lines) for lvl in ("DEBUG", "INFO", "WARN", "ERROR")
        }
        broken = SUMMARIZE.format(fix="", body=BROKEN_BODY, log=log)
        fixed = SUMMARIZE.format(fix="lines that do not start with a level are skipped.", body=FIXED_BODY, log=log)
        check = f"import json\nassert json.load(open('summary.json')) == {counts!r}\n"
        errors = str(counts["ERROR"])
        items.append(
            _item(
                "log-pipeline",
                i,
                3,
                {"summarize.py": broken, log: "\n".join(lines) + "\n"},
                f"`python3 summarize.py` should count the events per level in {log} and write summary.json, but it "
                "crashes. Fix summarize.py so that it skips lines that do not start with a level (DEBUG, INFO, WARN, "
                "ERROR), run it, and submit the number of ERROR events from summary.json.",
                {
                    "type": "all",
                    "checks": [
                        {"type": "tests", "files": {"test_summarize.py": SUMMARY_TESTS}},
                        {"type": "script", "files": {"check_summary.py": check}},
                        {"type": "answer", "value": errors},
                    ],
                },
                [
                    [call("shell", cmd="python3 summarize.py")],
                    [call("read_file", path="summarize.py")],
                    [call("write_file", path="summarize.py", content=fixed)],
                    [call("shell", cmd="python3 summarize.py && cat summary.json")],
                    [call("submit", answer=errors)],
                ],
                protected=[log],
            )
        )
    return items


PACKAGE_MAIN = """from {mod_a} import {fn_a}
from {mod_b} import {fn_b}

values = [int(x) for x in open("numbers.txt").read().split()]
open("result.txt", "w").write({fn_b}(str({fn_a}(values))) + "\\n")
print("wrote result.txt")
"""
PACKAGES = [
    ("toolbox", "mathutil", "total", "sum(values)", "textutil", "shout", "text + '!'"),
    ("kit", "numbers_util", "largest", "max(values)", "fmt", "boxed", "'[' + text + ']'"),
    ("common", "calc", "smallest", "min(values)", "style", "quoted", "'\"' + text + '\"'"),
    ("shared", "metrics", "count", "len(values)", "labels", "tagged", "'n=' + text"),
]


def package_move() -> list[dict]:
    """Move two helper modules into a new package and repoint main.py's imports at it."""
    rng, items = random.Random(26), []
    for i, (pkg, mod_a, fn_a, body_a, mod_b, fn_b, body_b) in enumerate(PACKAGES):
        values = [rng.randrange(1, 90) for _ in range(rng.randrange(3, 7))]
        files = {
            f"{mod_a}.py": f"def {fn_a}(values):\n    return {body_a}\n",
            f"{mod_b}.py": f"def {fn_b}(text):\n    return {body_b}\n",
            "main.py": PACKAGE_MAIN.format(mod_a=mod_a, fn_a=fn_a, mod_b=mod_b, fn_b=fn_b),
            "numbers.txt": " ".join(map(str, values)) + "\n",
        }
        new_main = PACKAGE_MAIN.format(mod_a=f"{pkg}.{mod_a}", fn_a=fn_a, mod_b=f"{pkg}.{mod_b}", fn_b=fn_b)
        result = str(eval(body_b, {"text": str(eval(body_a, {"values": values}))}))
        check = (
            "import os, runpy\n"
            f"assert not os.path.exists({mod_a + '.py'!r}) and not os.path.exists({mod_b + '.py'!r})\n"
            f"assert os.path.isfile({pkg + '/__init__.py'!r})\n"
            f"from {pkg}.{mod_a} import {fn_a}\nfrom {pkg}.{mod_b} import {fn_b}\n"
            "if os.path.exists('result.txt'):\n    os.remove('result.txt')\n"
            "runpy.run_path('main.py', run_name='__main__')\n"
            f"assert open('result.txt').read() == {result + chr(10)!r}\n"
        )
        items.append(
            _item(
                "package-move",
                i,
                3,
                files,
                f"Turn the helper modules {mod_a}.py and {mod_b}.py into a package: move them into a new folder "
                f"{pkg}/ with an __init__.py, and update main.py's imports so that `python3 main.py` still works. "
                "Run it, and submit the content of result.txt.",
                {
                    "type": "all",
                    "checks": [
                        {"type": "script", "files": {"check_package.py": check}},
                        {"type": "answer", "value": result},
                    ],
                },
                [
                    [call("shell", cmd="ls && cat main.py")],
                    [
                        call(
                            "shell", cmd=f"mkdir -p {pkg} && touch {pkg}/__init__.py && mv {mod_a}.py {mod_b}.py {pkg}/"
                        )
                    ],
                    [call("write_file", path="main.py", content=new_main)],
                    [call("shell", cmd="python3 main.py && cat result.txt")],
                    [call("submit", answer=result)],
                ],
            )
        )
    return items


def terminal_items() -> list[dict]:
    return [*create_file(), *move_file(), *configure(), *inspect_logs(), *organize(), *log_pipeline(), *package_move()]
