"""One eval path (docs/architecture.md): `temper eval run` and the pipeline's `eval` stage both call
`evals/evaluate.py: evaluate_config`, and only it runs suites on a model (`evaluate_model`) or
dispatches agent suites (`run_agent_suites`); a planted second dispatcher is caught."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "tempering"
ENTRY = "evals/evaluate.py"
RUNNERS = ("evaluate_model", "run_agent_suites")
"""What only `evaluate_config`'s module calls: plain suites on a loaded model, agent suites."""


def sources(root: Path = SRC) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))}


def callers(files: dict[str, str], name: str) -> set[str]:
    """Modules that call `name` (as a bare name, an attribute or an import alias)."""
    found = set()
    for path, text in files.items():
        tree = ast.parse(text)
        names = {name} | {
            a.asname for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names if a.name == name
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                if (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) in names:
                    found.add(path)
    return found


def second_eval_paths(files: dict[str, str]) -> list[str]:
    return sorted(f"{path}: {name}" for name in RUNNERS for path in callers(files, name) - {ENTRY})


def test_the_command_and_the_stage_share_evaluate_config():
    files = sources()
    assert second_eval_paths(files) == []
    assert all(callers(files, name) == {ENTRY} for name in RUNNERS)  # the entry does run both
    users = callers(files, "evaluate_config")
    assert "pipeline/stages.py" in users and any(p.startswith("cli/") for p in users), users


def test_a_planted_second_dispatch_is_caught():
    planted = {
        **sources(),
        "cli/planted.py": "from tempering.evals import agent_suites\nagent_suites.run_agent_suites(m, n, o)\n",
        "pipeline/planted.py": "from tempering.evals.evaluate import evaluate_model as run\nrun(m, s, o)\n",
        "serve/fine.py": '"""evaluate_model(m) in a docstring is no call."""\n',
    }
    assert second_eval_paths(planted) == ["cli/planted.py: run_agent_suites", "pipeline/planted.py: evaluate_model"]
