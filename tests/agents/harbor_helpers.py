"""A Harbor task folder written by a test: Harbor's layout with small defaults."""

from __future__ import annotations

from pathlib import Path

TOML = """version = "1.0"

[metadata]
difficulty = "medium"
category = "demo"

[verifier]
timeout_sec = 30.0
"""
DOCKERFILE = "FROM python:3.11-bookworm\nWORKDIR /app\nCOPY files/ /app/\n"
PASS_IF = """#!/bin/bash
mkdir -p /logs/verifier
if {condition}; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def write_task(
    root: Path,
    name: str = "demo",
    *,
    instruction: str = "Write `done` to /app/out.txt.",
    toml: str = TOML,
    dockerfile: str | None = DOCKERFILE,
    files: dict[str, str | bytes] | None = None,
    test: str | None = None,
    solve: str | None = "#!/bin/bash\necho done > /app/out.txt\n",
    extra: dict[str, str] | None = None,
) -> Path:
    """`root/name` holding a Harbor task; None leaves a part out."""
    d = root / name
    parts: dict[str, str | bytes | None] = {
        "instruction.md": instruction,
        "task.toml": toml,
        "environment/Dockerfile": dockerfile,
        "tests/test.sh": PASS_IF.format(condition='[ "$(cat /app/out.txt)" = done ]') if test is None else test,
        "solution/solve.sh": solve,
        **{f"environment/files/{k}": v for k, v in (files if files is not None else {"seed.txt": "seed\n"}).items()},
        **(extra or {}),
    }
    for rel, content in parts.items():
        if content is None:
            continue
        path = d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return d
