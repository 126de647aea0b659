"""One place for each job: a scan of the source tree fails on a second copy, and a planted copy
shows the scan would catch it."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tempering"


def call_sites(root: Path, name: str) -> list[str]:
    """`file:line` of every call of a function or class named `name` under `root`."""
    sites = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if called == name:
                    sites.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return sites


def files_of(sites: list[str]) -> set[str]:
    return {s.split(":")[0] for s in sites}


# ------------------------------------------------------------------ the training sequence
# The agent recipe (expert SFT, then trajectory-level RL) still builds its own Trainers.
TRAINER_OUTSIDE_SEQUENCE = {"agent.py"}


def training_sequence_copies(recipes: Path) -> set[str]:
    """Recipe files besides recipe.py that build a Trainer or run the file leakage guard themselves."""
    found = files_of(call_sites(recipes, "Trainer")) - TRAINER_OUTSIDE_SEQUENCE
    found |= files_of(call_sites(recipes, "check_private_overlap"))
    return found - {"recipe.py"}


def test_the_training_sequence_lives_in_recipe_py():
    assert training_sequence_copies(SRC / "recipes") == set()


def test_a_recipe_with_its_own_trainer_is_caught(tmp_path):
    (tmp_path / "recipe.py").write_text("def run(): return Trainer(1, 2, 3, 4, 5).fit()\n")
    (tmp_path / "kto.py").write_text("def run_kto(cfg):\n    check_private_overlap(cfg.files)\n    Trainer(m).fit()\n")
    assert training_sequence_copies(tmp_path) == {"kto.py"}


# ------------------------------------------------------------------ the training commands
def command_copies(cli: Path) -> list[str]:
    """Calls of `train_from_config` (the body of a training command): one, in the factory."""
    return call_sites(cli, "train_from_config")


def test_every_training_command_comes_from_one_factory():
    sites = command_copies(SRC / "cli")
    assert len(sites) == 1 and sites[0].startswith("train.py:"), sites


def test_a_hand_written_training_command_is_caught(tmp_path):
    (tmp_path / "train.py").write_text("def command(**kw):\n    train_from_config(A, run, kw, [], {})\n")
    (tmp_path / "extra.py").write_text("def kto(config):\n    print(train_from_config(K, run_kto, config, [], {}))\n")
    assert len(command_copies(tmp_path)) == 2


# ------------------------------------------------------------------ the epoch walk
def epoch_walk_copies(src: Path) -> set[str]:
    """Files besides data/batches.py that build their own epoch order."""
    return files_of(call_sites(src, "ExampleOrder")) - {"data/batches.py"}


def test_every_batch_source_walks_epochs_through_epoch_walk():
    assert epoch_walk_copies(SRC) == set()


def test_a_batch_source_with_its_own_order_is_caught(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "batches.py").write_text(
        "class EpochWalk:\n    def __init__(self): self.o = ExampleOrder(3, 0)\n"
    )
    (tmp_path / "rm.py").write_text("class RewardPairBatches:\n    def __init__(self): self.o = ExampleOrder(3, 0)\n")
    assert epoch_walk_copies(tmp_path) == {"rm.py"}
