""" "One place" claims of docs/architecture.md, each a scan of the source tree that fails on a
second copy, and a planted copy that shows the scan would catch it."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tempering"


# ------------------------------------------------------------------ task sources: the registry
def source_name_lists(tree: ast.AST, names: list[str]) -> list[int]:
    """Lines of tuple / list / set literals holding two or more task source names or prefixes."""
    stems = tuple(n.rstrip(":") for n in names)

    def is_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.rstrip(":") in stems

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(map(is_name, node.elts)) >= 2
    ]


def _registered() -> list[str]:
    from tempering.sources.registry import SOURCES

    return [*SOURCES, "builtin:"]


def test_task_source_names_are_listed_only_by_the_registry():
    """Which `tasks.source` values name a source is `sources.registry` alone: no string list elsewhere."""
    found = {
        str(p.relative_to(SRC)): lines
        for p in SRC.rglob("*.py")
        if (lines := source_name_lists(ast.parse(p.read_text()), _registered()))
    }
    assert found == {}


def test_a_planted_list_of_source_names_is_caught():
    planted = ast.parse('_NOT_FILES = ("builtin:", "humaneval", "reasoning_gym:")\n')
    assert source_name_lists(planted, _registered()) == [1]


# ------------------------------------------------------------------ config path keys: per class
def dotted_path_key_lists(tree: ast.AST) -> list[int]:
    """Lines of tuples / lists of two or more dotted config keys ending in a declared path field."""
    from tempering.config import DataSettings, ReplaySettings, TaskSourceSettings

    leaves = {f for c in (DataSettings, ReplaySettings, TaskSourceSettings) for f in c.path_fields}

    def is_key(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "." in node.value
            and node.value.rsplit(".", 1)[1] in leaves
        )

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List)) and sum(map(is_key, node.elts)) >= 2
    ]


def test_config_loading_reads_path_fields_from_the_classes_not_a_key_list():
    """The config package declares data paths only as each class's `path_fields`."""
    found = {
        str(p.relative_to(SRC)): lines
        for p in (SRC / "config").rglob("*.py")
        if (lines := dotted_path_key_lists(ast.parse(p.read_text())))
    }
    assert found == {}


def test_a_planted_global_path_key_list_is_caught():
    planted = ast.parse('PATH_KEYS = (\n    "data.train",\n    "data.eval",\n    "tasks.source",\n)\n')
    assert dotted_path_key_lists(planted) == [1]


def undeclared_stage_inputs(kinds: dict) -> dict[str, set[str]]:
    """Per stage kind, the path fields its config class declares that the stage's inputs omit."""
    from tempering.config import declared_paths

    missing = {name: set(declared_paths(kind.config)) - set(kind.inputs) for name, kind in kinds.items()}
    return {name: keys for name, keys in missing.items() if keys}


def test_every_declared_path_field_is_a_checked_and_hashed_pipeline_input():
    """The plan checks and hashes a stage's inputs; each path a config class declares is one of them."""
    from tempering.pipeline.stages import KINDS

    assert undeclared_stage_inputs(KINDS) == {}


def test_a_stage_kind_that_drops_a_declared_path_is_caught():
    from dataclasses import replace

    from tempering.pipeline.stages import KINDS

    planted = {"grpo": replace(KINDS["grpo"], inputs=("tasks.source",))}
    assert undeclared_stage_inputs(planted) == {"grpo": {"heldout.tasks.source"}}
