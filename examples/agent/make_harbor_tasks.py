"""Write the shipped Harbor tasks (examples/harbor/<task>/) from the definitions in harbor_defs.py.

    python examples/agent/make_harbor_tasks.py      # rewrites examples/harbor

Each task is a folder in Harbor's format (harbor 0.25, the Terminal-Bench 2 layout), so Harbor
itself runs it under Docker (`harbor run -p examples/harbor/<task> -a oracle`), and Tempering
runs it without Docker through the `harbor` suite (`agent:harbor`, docs/agents.md):

    instruction.md          the task text
    task.toml               metadata (category, difficulty -> tier, split) and timeouts
    environment/Dockerfile  FROM python:3.11-bookworm (bash, coreutils, python3, git), WORKDIR /app,
                            COPY files/ /app/ when the task starts with files
    environment/files/      the starting files
    tests/test.sh           the verifier: writes /logs/verifier/reward.txt (1 or 0; a few tasks
                            give partial credit, one through reward.json)
    solution/solve.sh       the oracle

The folders are data: this script only saves typing. tests/agents/test_harbor.py checks that
every oracle scores 1 and doing nothing scores 0.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import harbor_defs  # noqa: E402  (the task definitions, beside this script)

OUT = Path(__file__).resolve().parents[2] / "examples" / "harbor"
IMAGE = "python:3.11-bookworm"
"""A plain image with bash, coreutils, python3 and git: what the sandbox's toolchain offers."""

PASS_FAIL = """#!/bin/bash
# Harbor verifier: runs from the working directory (/app) after the agent; writes the reward.
mkdir -p /logs/verifier

check() {{
{checks}
}}

if check; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

TOML = """version = "1.0"

[metadata]
author_name = "Tempering"
difficulty = "{difficulty}"
category = "{category}"
tags = [{tags}]
split = "{split}"

[verifier]
timeout_sec = 60.0

[agent]
timeout_sec = 300.0

[environment]
build_timeout_sec = 600.0
cpus = 1
memory_mb = 512
"""


def dockerfile(has_files: bool) -> str:
    copy = "COPY files/ /app/\n" if has_files else ""
    return f"FROM {IMAGE}\n\nWORKDIR /app\n\n{copy}"


def test_script(task: harbor_defs.Task) -> str:
    if task.test is not None:
        return task.test
    return PASS_FAIL.format(checks="\n".join(f"  {c} || return 1" for c in task.checks))


def write(task: harbor_defs.Task, root: Path) -> None:
    d = root / task.name
    files = {
        "instruction.md": task.instruction.strip() + "\n",
        "task.toml": TOML.format(
            difficulty=task.difficulty,
            category=task.category,
            tags=", ".join(f'"{t}"' for t in (task.category, *task.tags)),
            split=task.split,
        ),
        "environment/Dockerfile": dockerfile(bool(task.files)),
        "tests/test.sh": test_script(task),
        "solution/solve.sh": "#!/bin/bash\nset -e\ncd /app\n" + task.solve.strip() + "\n",
        **{f"environment/files/{k}": v for k, v in task.files.items()},
        **{f"tests/{k}": v for k, v in task.test_files.items()},
    }
    for rel, text in files.items():
        path = d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
        if rel.endswith(".sh") and rel.startswith(("tests/", "solution/")):
            path.chmod(0o755)


def main() -> None:
    tasks = harbor_defs.tasks()
    names = [t.name for t in tasks]
    assert len(set(names)) == len(names), "task names must be unique"
    if OUT.exists():
        shutil.rmtree(OUT)
    for task in tasks:
        write(task, OUT)
    print(f"wrote {len(tasks)} Harbor tasks to {OUT}")


if __name__ == "__main__":
    main()
