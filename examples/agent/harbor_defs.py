"""The shipped Harbor tasks, one `Task` each (written out by make_harbor_tasks.py).

Checks are one-line bash conditions run from /app; expected outputs the agent must not see live
in tests/ (copied to /tests only when the verifier runs). Python checks run under `python3 -I`
(no site, no script folder on sys.path) with /app appended last, read a nonce from stdin before
importing the agent's code, and compare only `str`/`int`/`float` values by their own type, so an
early exit or an object equal to everything does not pass.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

import harbor_repos  # noqa: F401  (imported for its tasks below)


@dataclass
class Task:
    name: str
    category: str
    difficulty: str
    split: str
    instruction: str
    solve: str
    files: dict[str, str] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    test: str | None = None
    """A whole test.sh (partial credit), instead of `checks`."""
    test_files: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()


def same(path: str, expected: str) -> str:
    """A check: the file's text (trailing newlines aside) is `expected` (kept in tests/)."""
    return f'[ "$(cat {path})" = "$(cat /tests/{expected})" ]'


def nonce_check(script: str) -> list[str]:
    """Checks that run /tests/<script> under `python3 -I` and want its last line `passed <nonce>`."""
    return [
        "nonce=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')",
        f'out=$(echo "$nonce" | python3 -I -B /tests/{script} 2>&1 | tail -n 1)',
        '[ "$out" = "passed $nonce" ]',
    ]


ESSAY = (
    "Harbor tasks are folders.\nEach folder holds an instruction, a test and a solution.\n\n"
    "The verifier writes a reward file, and the reward is a number between zero and one.\n"
)
CONTACTS = "Ann <ann@example.com>\nbob@Example.com\nann@EXAMPLE.com\ncarol@site.org, dave@site.org\nBOB@example.com\n"
LOG = (
    "2024-05-01 10:00:01 INFO start\n2024-05-01 10:00:02 ERROR disk full\n2024-05-01 10:00:03 WARN slow\n"
    "2024-05-01 10:00:04 ERROR retry failed\n2024-05-01 10:00:05 INFO done\n2024-05-01 10:00:06 ERRORS? no\n"
)
SALES = "region,amount\nnorth,10\nsouth,5\nnorth,7\neast,3\nsouth,20\neast,4\n"
WORDS = "the cat and the dog\nA cat, the dog; the cat!\n"
POEM = "one\ntwo\nthree\nfour\n"


def file_tasks() -> list[Task]:
    return [
        Task(
            "create-hello",
            "files",
            "easy",
            "train",
            "Create a file named `hello.txt` in `/app` containing exactly the line `Hello, Harbor!`.",
            "echo 'Hello, Harbor!' > /app/hello.txt",
            checks=['[ "$(cat /app/hello.txt)" = "Hello, Harbor!" ]'],
        ),
        Task(
            "sort-by-extension",
            "files",
            "medium",
            "train",
            "Move every file in `/app/inbox` into a folder of `/app/sorted` named after its extension "
            "(for example `inbox/a.txt` goes to `sorted/txt/a.txt`). `inbox` must be left empty.",
            'for f in inbox/*; do e="${f##*.}"; mkdir -p "sorted/$e"; mv "$f" "sorted/$e/"; done',
            files={"inbox/a.txt": "a\n", "inbox/b.txt": "b\n", "inbox/c.csv": "x,y\n", "inbox/d.md": "# d\n"},
            checks=[
                '[ -z "$(ls -A /app/inbox)" ]',
                '[ "$(cd /app/sorted && find . -type f | sort | tr "\\n" " ")" = "./csv/c.csv ./md/d.md ./txt/a.txt ./txt/b.txt " ]',
                '[ "$(cat /app/sorted/csv/c.csv)" = "x,y" ]',
            ],
        ),
        Task(
            "lowercase-names",
            "files",
            "easy",
            "train",
            "Rename every file in `/app/photos` so that its name is all lower case (`IMG_01.JPG` becomes `img_01.jpg`).",
            'cd photos && for f in *; do l=$(echo "$f" | tr A-Z a-z); [ "$f" = "$l" ] || mv "$f" "$l"; done',
            files={"photos/IMG_01.JPG": "1\n", "photos/Beach.PNG": "2\n", "photos/notes.txt": "3\n"},
            checks=['[ "$(ls /app/photos | tr "\\n" " ")" = "beach.png img_01.jpg notes.txt " ]'],
        ),
        Task(
            "delete-tmp-files",
            "files",
            "easy",
            "train",
            "Delete every `.tmp` file under `/app/scratch`, subfolders included. Keep every other file.",
            "find scratch -name '*.tmp' -type f -delete",
            files={
                "scratch/a.o": "o\n",
                "scratch/b.tmp": "t\n",
                "scratch/keep.c": "c\n",
                "scratch/sub/c.tmp": "t\n",
                "scratch/sub/d.h": "h\n",
            },
            checks=[
                '[ "$(cd /app/scratch && find . -type f | sort | tr "\\n" " ")" = "./a.o ./keep.c ./sub/d.h " ]',
            ],
        ),
        Task(
            "largest-file",
            "files",
            "medium",
            "heldout",
            "Write the name of the largest file in `/app/data` (its path relative to `/app/data`, "
            "subfolders included) to `/app/answer.txt`.",
            "cd data && find . -type f -printf '%s %P\\n' | sort -n | tail -n 1 | cut -d' ' -f2 > /app/answer.txt",
            files={
                "data/small.txt": "x\n",
                "data/logs/big.log": "line\n" * 40,
                "data/mid.csv": "a,b\n" * 5,
                "data/logs/old.log": "y\n" * 9,
            },
            checks=['[ "$(cat /app/answer.txt)" = "logs/big.log" ]'],
        ),
        Task(
            "join-parts",
            "files",
            "medium",
            "heldout",
            "Concatenate the files `/app/parts/part*.txt` in numeric order of their number "
            "(`part2` before `part10`) into `/app/whole.txt`.",
            "for i in $(ls parts | sed 's/[^0-9]//g' | sort -n); do cat parts/part$i.txt; done > whole.txt",
            files={"parts/part1.txt": "alpha\n", "parts/part2.txt": "beta\n", "parts/part10.txt": "gamma\n"},
            checks=['[ "$(cat /app/whole.txt | tr "\\n" " ")" = "alpha beta gamma " ]'],
        ),
        Task(
            "make-executable",
            "files",
            "easy",
            "heldout",
            "The script `/app/run.sh` cannot be executed. Make it executable, then run it (it writes `/app/out.txt`).",
            "chmod +x run.sh && ./run.sh",
            files={"run.sh": "#!/bin/bash\necho ran > out.txt\n"},
            checks=["[ -x /app/run.sh ]", '[ "$(cat /app/out.txt)" = "ran" ]'],
        ),
        Task(
            "link-newest-release",
            "files",
            "medium",
            "train",
            "Create a symbolic link `/app/current` that points to the newest release folder in `/app/releases` "
            "(by version: `v1.10` is newer than `v1.2`).",
            'ln -s "releases/$(ls releases | sort -V | tail -n 1)" current',
            files={
                "releases/v1.2/app.txt": "1.2\n",
                "releases/v1.10/app.txt": "1.10\n",
                "releases/v1.9/app.txt": "1.9\n",
            },
            checks=["[ -L /app/current ]", '[ "$(cat /app/current/app.txt)" = "1.10" ]'],
        ),
    ]


def text_tasks() -> list[Task]:
    return [
        Task(
            "count-words",
            "text",
            "easy",
            "train",
            "Write the number of words in `/app/essay.txt` (as `wc -w` counts them) to `/app/count.txt`.",
            "wc -w < essay.txt | tr -d ' ' > count.txt",
            files={"essay.txt": ESSAY},
            checks=[f'[ "$(tr -d " " < /app/count.txt)" = "{len(ESSAY.split())}" ]'],
        ),
        Task(
            "distinct-emails",
            "text",
            "medium",
            "train",
            "Write every distinct email address found in `/app/contacts.txt`, in lower case and sorted, "
            "one per line, to `/app/emails.txt`.",
            "grep -oiE '[a-z0-9.]+@[a-z0-9.]+\\.[a-z]+' contacts.txt | tr A-Z a-z | sort -u > emails.txt",
            files={"contacts.txt": CONTACTS},
            checks=[same("/app/emails.txt", "expected.txt")],
            test_files={"expected.txt": "ann@example.com\nbob@example.com\ncarol@site.org\ndave@site.org\n"},
        ),
        Task(
            "edit-settings",
            "text",
            "easy",
            "train",
            "In `/app/settings.ini` set `port` to `9090` and `debug` to `false`. Change nothing else.",
            "sed -i -e 's/^port=.*/port=9090/' -e 's/^debug=.*/debug=false/' settings.ini",
            files={"settings.ini": "[server]\nhost=localhost\nport=8080\ndebug=true\nworkers=4\n"},
            checks=[same("/app/settings.ini", "expected.ini")],
            test_files={"expected.ini": "[server]\nhost=localhost\nport=9090\ndebug=false\nworkers=4\n"},
        ),
        Task(
            "extract-errors",
            "text",
            "easy",
            "train",
            "Write every line of `/app/app.log` whose level is `ERROR` to `/app/errors.log`, in their order.",
            "awk '$3 == \"ERROR\"' app.log > errors.log",
            files={"app.log": LOG},
            checks=[same("/app/errors.log", "expected.log")],
            test_files={"expected.log": "".join(x + "\n" for x in LOG.splitlines() if x.split()[2] == "ERROR")},
        ),
        Task(
            "top-words",
            "text",
            "hard",
            "heldout",
            "Count the words of `/app/words.txt` (lower case, letters only: `Cat,` is `cat`). Write the three "
            "most frequent to `/app/top.txt` as `word count`, one per line, most frequent first.",
            "tr -cs 'A-Za-z' '\\n' < words.txt | tr A-Z a-z | grep . | sort | uniq -c | sort -rn | head -n 3 "
            "| awk '{print $2, $1}' > top.txt",
            files={"words.txt": WORDS},
            checks=[same("/app/top.txt", "expected.txt")],
            test_files={"expected.txt": "the 4\ncat 3\ndog 2\n"},
        ),
        Task(
            "region-totals",
            "text",
            "medium",
            "train",
            "`/app/sales.csv` has a header and rows `region,amount`. Write `/app/totals.csv` with the header "
            "`region,total` and one row per region with the sum of its amounts, sorted by region.",
            "(echo region,total; tail -n +2 sales.csv | awk -F, '{t[$1]+=$2} END {for (r in t) print r\",\"t[r]}' "
            "| sort) > totals.csv",
            files={"sales.csv": SALES},
            checks=[same("/app/totals.csv", "expected.csv")],
            test_files={"expected.csv": "region,total\neast,7\nnorth,17\nsouth,25\n"},
        ),
        Task(
            "json-to-csv",
            "text",
            "medium",
            "heldout",
            "`/app/users.json` is a list of users. Write `/app/users.csv` with the header `name,age` and one row "
            "per user, in the order of the file.",
            "python3 - <<'EOF'\nimport json\nusers = json.load(open('users.json'))\nwith open('users.csv', 'w') as f:\n"
            "    f.write('name,age\\n')\n    for u in users:\n        f.write(f\"{u['name']},{u['age']}\\n\")\nEOF",
            files={
                "users.json": '[{"name": "Ada", "age": 36, "city": "London"}, {"name": "Linus", "age": 54}, '
                '{"age": 41, "name": "Grace"}]\n'
            },
            checks=[same("/app/users.csv", "expected.csv")],
            test_files={"expected.csv": "name,age\nAda,36\nLinus,54\nGrace,41\n"},
        ),
        Task(
            "dedupe-lines",
            "text",
            "easy",
            "train",
            "Remove the repeated lines of `/app/list.txt` in place, keeping the first occurrence of each line "
            "and the order of the file.",
            "awk '!seen[$0]++' list.txt > list.new && mv list.new list.txt",
            files={"list.txt": "pear\napple\npear\nfig\napple\nkiwi\n"},
            checks=['[ "$(cat /app/list.txt | tr "\\n" " ")" = "pear apple fig kiwi " ]'],
        ),
        Task(
            "unix-line-endings",
            "text",
            "easy",
            "heldout",
            "`/app/notes.txt` has Windows line endings (CRLF). Convert it to Unix line endings (LF) in place.",
            "sed -i 's/\\r$//' notes.txt",
            files={"notes.txt": "first\r\nsecond\r\nthird\r\n"},
            checks=[
                "! grep -q $'\\r' /app/notes.txt",
                '[ "$(cat /app/notes.txt | tr "\\n" " ")" = "first second third " ]',
            ],
        ),
        Task(
            "reverse-lines",
            "text",
            "easy",
            "train",
            "Write the lines of `/app/poem.txt` in reverse order (last line first) to `/app/reversed.txt`.",
            "tac poem.txt > reversed.txt",
            files={"poem.txt": POEM},
            checks=['[ "$(cat /app/reversed.txt | tr "\\n" " ")" = "four three two one " ]'],
        ),
        Task(
            "fill-template",
            "text",
            "medium",
            "heldout",
            "Fill in `/app/template.txt`: replace each `{{key}}` with its value from `/app/values.env` "
            "(lines `key=value`). Write the result to `/app/letter.txt`.",
            'cp template.txt letter.txt; while IFS== read -r k v; do sed -i "s/{{$k}}/$v/g" letter.txt; done < values.env',
            files={
                "template.txt": "Dear {{name}},\nwelcome to {{city}}. See you in {{city}}!\n",
                "values.env": "name=Ada\ncity=Paris\n",
            },
            checks=[same("/app/letter.txt", "expected.txt")],
            test_files={"expected.txt": "Dear Ada,\nwelcome to Paris. See you in Paris!\n"},
        ),
    ]


SAMPLE = "a hidden file\nwith two words\nand more lines\n"


def wc(text: str) -> str:
    return f"{text.count(chr(10))} {len(text.split())} {len(text)}"


FIZZ = "".join(
    ("FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)) + "\n"
    for i in range(1, 16)
)
PROJECT = {"project/README.md": "# project\n", "project/src/main.py": "print('hi')\n", "project/src/util.py": "X = 1\n"}


def shell_tasks() -> list[Task]:
    return [
        Task(
            "fizzbuzz-script",
            "shell",
            "medium",
            "train",
            "Write a bash script `/app/fizz.sh` that prints the numbers 1 to N, one per line, with `Fizz` for "
            "multiples of 3, `Buzz` for multiples of 5 and `FizzBuzz` for multiples of both. N is its first "
            "argument (`bash /app/fizz.sh 15`).",
            "cat > fizz.sh <<'EOF'\nfor i in $(seq 1 \"$1\"); do\n  if [ $((i % 15)) -eq 0 ]; then echo FizzBuzz\n"
            "  elif [ $((i % 3)) -eq 0 ]; then echo Fizz\n  elif [ $((i % 5)) -eq 0 ]; then echo Buzz\n"
            "  else echo $i; fi\ndone\nEOF",
            checks=[
                same("<(bash /app/fizz.sh 15)", "expected15.txt"),
                '[ "$(bash /app/fizz.sh 2 | tr "\\n" " ")" = "1 2 " ]',
            ],
            test_files={"expected15.txt": FIZZ},
        ),
        Task(
            "wc-script",
            "shell",
            "medium",
            "heldout",
            "Write a Python script `/app/wc.py` that takes a file path as its argument and prints "
            "`LINES WORDS CHARS` of that file (as `wc -l`, `wc -w` and `wc -m` count them), separated by one space.",
            "cat > wc.py <<'EOF'\nimport sys\ntext = open(sys.argv[1], encoding='utf-8').read()\n"
            "print(text.count('\\n'), len(text.split()), len(text))\nEOF",
            checks=[f'[ "$(python3 /app/wc.py /tests/sample.txt)" = "{wc(SAMPLE)}" ]'],
            test_files={"sample.txt": SAMPLE},
        ),
        Task(
            "backup-archive",
            "shell",
            "easy",
            "train",
            "Create a gzip-compressed tar archive `/app/backup.tar.gz` of the folder `/app/project` "
            "(paths inside the archive start with `project/`).",
            "tar -czf backup.tar.gz project",
            files=PROJECT,
            checks=[
                "[ \"$(tar -tzf /app/backup.tar.gz | grep -v '/$' | sort | tr '\\n' ' ')\" = "
                '"project/README.md project/src/main.py project/src/util.py " ]',
                '[ "$(tar -xzOf /app/backup.tar.gz project/src/util.py)" = "X = 1" ]',
            ],
        ),
        Task(
            "checksums",
            "shell",
            "medium",
            "train",
            "Write the SHA-256 checksums of every file in `/app/dl` to `/app/SHA256SUMS`, in the format "
            "`sha256sum` prints, with paths like `dl/a.bin`, sorted by path.",
            "sha256sum dl/* | sort -k2 > SHA256SUMS",
            files={"dl/a.bin": "aaa\n", "dl/b.bin": "bbb\n", "dl/c.iso": "ccc\n"},
            checks=[
                "(cd /app && sha256sum --quiet -c SHA256SUMS)",
                "[ \"$(awk '{print $2}' /app/SHA256SUMS | tr '\\n' ' ')\" = \"dl/a.bin dl/b.bin dl/c.iso \" ]",
            ],
        ),
        Task(
            "find-todos",
            "shell",
            "medium",
            "heldout",
            "Write `FILE:LINE` (path relative to `/app`, line number) for every line containing `TODO` in the "
            "files under `/app/src`, one per line, sorted, to `/app/todos.txt`.",
            "grep -rn TODO src | cut -d: -f1,2 | sort > todos.txt",
            files={
                "src/a.py": "x = 1  # TODO rename\ny = 2\n# TODO: test\n",
                "src/lib/b.sh": "echo hi\n# TODO\n",
                "src/c.txt": "nothing\n",
            },
            checks=[same("/app/todos.txt", "expected.txt")],
            test_files={"expected.txt": "src/a.py:1\nsrc/a.py:3\nsrc/lib/b.sh:2\n"},
        ),
        Task(
            "status-counts",
            "shell",
            "hard",
            "train",
            "`/app/access.log` has one request per line; the 9th field is the HTTP status. Write "
            "`/app/status.json`: a JSON object mapping each status (a string) to its number of requests.",
            "python3 -c \"import json, collections; c = collections.Counter(l.split()[8] for l in open('access.log') "
            "if l.strip()); json.dump(c, open('status.json', 'w'))\"",
            files={
                "access.log": "".join(
                    f'10.0.0.{i} - - [01/May/2024:10:00:0{i % 10} +0000] "GET /p{i} HTTP/1.1" {s} 12\n'
                    for i, s in enumerate([200, 404, 200, 500, 200, 404, 301])
                )
            },
            checks=[
                "python3 -I -c \"import json, sys; d = json.load(open('/app/status.json')); "
                "sys.exit(0 if d == {'200': 3, '404': 2, '500': 1, '301': 1} else 1)\""
            ],
        ),
    ]


def git_tasks() -> list[Task]:
    git = "git -C /app"
    return [
        Task(
            "git-first-commit",
            "git",
            "easy",
            "train",
            "Make `/app` a git repository and commit all of its files in one commit with the message `Initial commit`.",
            "git init -q . && git add -A && git -c user.name=dev -c user.email=dev@example.com commit -qm 'Initial commit'",
            files={"README.md": "# demo\n", "main.py": "print('demo')\n"},
            checks=[
                f'[ "$({git} log --format=%s)" = "Initial commit" ]',
                f'[ "$({git} ls-files | tr "\\n" " ")" = "README.md main.py " ]',
                f'[ -z "$({git} status --porcelain)" ]',
            ],
        ),
        Task(
            "git-ignore-dist",
            "git",
            "medium",
            "train",
            "Make `/app` a git repository with a `.gitignore` that ignores the `dist` folder and every `.log` "
            "file, and commit everything else (the `.gitignore` included) in one commit.",
            "printf 'dist/\\n*.log\\n' > .gitignore && git init -q . && git add -A && "
            "git -c user.name=dev -c user.email=dev@example.com commit -qm 'add sources'",
            files={"src/app.py": "print(1)\n", "dist/out.txt": "binary\n", "run.log": "log\n", "src/debug.log": "d\n"},
            checks=[
                f'[ "$({git} ls-files | tr "\\n" " ")" = ".gitignore src/app.py " ]',
                f'[ -z "$({git} status --porcelain)" ]',
                f'[ "$({git} rev-list --count HEAD)" = 1 ]',
            ],
        ),
        Task(
            "git-feature-branch",
            "git",
            "hard",
            "train",
            "Make `/app` a git repository and commit `notes.txt` with the message `base`. Then create a branch "
            "`feature`, add a file `feature.txt` holding the line `on feature` and commit it there with the message "
            "`add feature`. Leave `feature` checked out.",
            "g='git -c user.name=dev -c user.email=dev@example.com'; git init -q . && git add notes.txt && "
            "$g commit -qm base && git checkout -qb feature && echo 'on feature' > feature.txt && git add feature.txt "
            "&& $g commit -qm 'add feature'",
            files={"notes.txt": "notes\n"},
            checks=[
                f'[ "$({git} rev-parse --abbrev-ref HEAD)" = feature ]',
                f'[ "$({git} log --format=%s | tr "\\n" " ")" = "add feature base " ]',
                f"! {git} cat-file -e HEAD~1:feature.txt 2>/dev/null",
                f'[ "$({git} show HEAD:feature.txt)" = "on feature" ]',
            ],
        ),
        Task(
            "git-tag-release",
            "git",
            "medium",
            "heldout",
            "Make `/app` a git repository, commit all files with the message `v1`, and create an annotated tag "
            "`v1.0.0` on that commit with the message `first release`.",
            "g='git -c user.name=dev -c user.email=dev@example.com'; git init -q . && git add -A && $g commit -qm v1 "
            "&& $g tag -a v1.0.0 -m 'first release'",
            files={"VERSION": "1.0.0\n"},
            checks=[
                f'[ "$({git} cat-file -t v1.0.0)" = tag ]',
                f'[ "$({git} for-each-ref refs/tags/v1.0.0 --format=\'%(contents:subject)\')" = "first release" ]',
                f'[ "$({git} rev-parse v1.0.0^{{commit}})" = "$({git} rev-parse HEAD)" ]',
            ],
        ),
        Task(
            "apply-patch",
            "git",
            "medium",
            "heldout",
            "Apply the unified diff `/app/fix.patch` to the files in `/app` (`git` and `patch` are installed).",
            "git apply fix.patch",
            files={"greet.py": GREET, "fix.patch": patch("greet.py", GREET, GREET_FIXED)},
            checks=[same("/app/greet.py", "expected.py")],
            test_files={"expected.py": GREET_FIXED},
        ),
    ]


GREET = "def greet(name):\n    return 'Hello ' + name\n\n\nprint(greet('world'))\n"
GREET_FIXED = "def greet(name):\n    return f'Hello, {name}!'\n\n\nprint(greet('world'))\n"


def patch(name: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{name}", f"b/{name}")
    return "".join(lines)


def tasks() -> list[Task]:
    return [*file_tasks(), *text_tasks(), *shell_tasks(), *git_tasks(), *harbor_repos.repo_tasks(Task, nonce_check)]
