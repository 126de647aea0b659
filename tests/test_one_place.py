"""Claims of "one place" in docs/architecture.md, each a scan of the tree that fails on a second
copy, and a planted copy showing the scan can fail."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tempering"

# --- engines are built in one place: rollout/select.py (build_engine) ---

ENGINE_CLASSES = {"HFEngine", "BatchingEngine", "SpeculativeEngine", "VLLMEngine"}
ENGINE_BUILDER = "rollout/select.py"
"""The one module that constructs engine classes; every command reaches it via build_engine or load_engine."""


def engine_constructions(source: str) -> list[int]:
    """Lines of `source` that call an engine class (by name, attribute or import alias)."""
    tree = ast.parse(source)
    names = set(ENGINE_CLASSES)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname for a in node.names if a.name in ENGINE_CLASSES and a.asname}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if called in names:
                lines.append(node.lineno)
    return lines


def engines_built_outside_the_builder(root: Path) -> list[str]:
    return [
        f"{path.relative_to(root)}:{line}"
        for path in sorted(root.rglob("*.py"))
        if path.relative_to(root).as_posix() != ENGINE_BUILDER
        for line in engine_constructions(path.read_text(encoding="utf-8"))
    ]


def test_engines_are_built_only_by_build_engine():
    """No module but rollout/select.py constructs an engine class, so every command that samples
    can run any engine kind (vLLM, speculative) its `engine:` names."""
    assert engines_built_outside_the_builder(SRC) == []
    assert engine_constructions((SRC / ENGINE_BUILDER).read_text(encoding="utf-8"))  # the builder does build


def test_a_planted_engine_construction_is_caught(tmp_path):
    (tmp_path / "rollout").mkdir()
    (tmp_path / ENGINE_BUILDER).write_text("HFEngine(model, tok)\n")
    (tmp_path / "chat.py").write_text(
        '"""HFEngine(model, tok) in a docstring is no construction."""\n'
        "from tempering.rollout.engine import HFEngine as Engine\n"
        "def make(m, t):\n"
        "    return Engine(m, t)\n"
    )
    (tmp_path / "serve.py").write_text("import tempering.rollout.batching_engine as be\nx = be.BatchingEngine(m, t)\n")
    assert engines_built_outside_the_builder(tmp_path) == ["chat.py:4", "serve.py:2"]


# ---------------------------------------------------------------- bench: where results go


def bench_results_paths(bench: Path) -> list[str]:
    """Bench scripts that build a path ending in a "results" component themselves (`X / "results"`,
    `os.path.join(..., "results", ...)`); only `_shared/paths.py` may."""
    found = []
    for path in sorted(bench.rglob("*.py")):
        if path.relative_to(bench).as_posix() == "_shared/paths.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            parts = []
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                parts = [node.right]
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "os.path.join":
                parts = node.args
            if any(isinstance(p, ast.Constant) and p.value == "results" for p in parts):
                found.append(f"{path.relative_to(bench)}:{node.lineno}")
    return found


def test_bench_results_folder_is_named_in_one_place():
    assert bench_results_paths(ROOT / "bench") == []
    assert "RESULTS" in (ROOT / "bench" / "_shared" / "paths.py").read_text()


def test_a_bench_script_building_its_own_results_path_is_caught(tmp_path):
    script = tmp_path / "throughput" / "new.py"
    script.parent.mkdir()
    script.write_text('from pathlib import Path\nOUT = Path(__file__).parent / "results" / "new.json"\n')
    other = tmp_path / "experiments" / "old.py"
    other.parent.mkdir()
    other.write_text('import os\nOUT = os.path.join(os.path.dirname(__file__), "results", "old.json")\n')
    assert bench_results_paths(tmp_path) == ["experiments/old.py:2", "throughput/new.py:2"]


# -- GRPO batches are built in one place: rollout/grpo_batches.py --------------------------------
GRPO_BUILDER = "rollout/grpo_batches.py"


def grpo_batch_builders(src: Path) -> set[str]:
    """Modules that construct a `GRPOBatch(...)` or fill a GRPO batch's `engine_logprobs`/`old_logprobs`
    tensors by index (a second copy of the tensor building)."""
    found = set()
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            builds = isinstance(node, ast.Call) and getattr(node.func, "id", None) == "GRPOBatch"
            indexed = (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Store)
                and getattr(node.value, "id", None) in ("engine_logprobs", "old_logprobs")
            )
            if builds or indexed:
                found.add(path.relative_to(src).as_posix())
    return found


def test_grpo_batches_are_built_in_one_place_for_single_and_multi_turn():
    assert grpo_batch_builders(SRC) == {GRPO_BUILDER}


def test_a_second_grpo_batch_builder_is_found(tmp_path):
    src = tmp_path / "tempering"
    (src / "rollout").mkdir(parents=True)
    (src / "agents").mkdir()
    (src / GRPO_BUILDER).write_text((SRC / GRPO_BUILDER).read_text())
    (src / "agents" / "training.py").write_text(
        "import torch\n"
        "def tensors(trajs, width):\n"
        "    engine_logprobs = torch.zeros((len(trajs), width))\n"
        "    for i, t in enumerate(trajs):\n"
        "        engine_logprobs[i, : len(t.completion_ids)] = torch.tensor(t.completion_logprobs)\n"
        "    return engine_logprobs\n"
    )
    assert grpo_batch_builders(src) == {GRPO_BUILDER, "agents/training.py"}
    (src / "agents" / "training.py").write_text("def build(**k):\n    return GRPOBatch(**k)\n")
    assert grpo_batch_builders(src) == {GRPO_BUILDER, "agents/training.py"}


# ------------------------------------------------------------------ task sources: the registry
def source_name_lists(tree: ast.AST, names: list[str]) -> list[int]:
    """Lines of tuple / list / set literals holding two or more task source names or prefixes."""
    stems = tuple(n.rstrip(":") for n in names)

    def is_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.rstrip(":") in stems

    # the data-mix tracks (`config.data.Track`: general, reasoning, agent, longctx, ...) share two
    # words with source prefixes (`agent:`, `longctx:`) but name tracks, not sources
    tracks = {
        id(node.value.slice)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["Track"]
        and isinstance(node.value, ast.Subscript)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set))
        and sum(map(is_name, node.elts)) >= 2
        and id(node) not in tracks
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


# ------------------------------------------------------------------ algorithm names: the registries
def algorithm_name_lists(tree: ast.AST) -> list[int]:
    """Lines of tuple / list / set literals (a `Literal[...]` included) holding two or more names
    registered in one family of `tempering.algorithms` (a second list to keep in step)."""
    from tempering import algorithms

    algorithms.load()
    families = [set(algorithms.names(f)) for f in ("advantage", "policy_loss", "preference_loss", "tinker_loss")]

    def count(node: ast.AST, names: set[str]) -> int:
        elts = getattr(node, "elts", [])
        return sum(isinstance(e, ast.Constant) and e.value in names for e in elts)

    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(count(node, names) >= 2 for names in families)
    ]


def test_algorithm_names_are_listed_only_by_the_registries():
    """Which loss and advantage names exist is `tempering.algorithms` alone: configs validate against it."""
    found = {
        str(p.relative_to(SRC)): lines
        for p in SRC.rglob("*.py")
        if (lines := algorithm_name_lists(ast.parse(p.read_text())))
    }
    assert found == {}


def test_a_planted_literal_of_loss_names_is_caught():
    planted = ast.parse('loss: Literal["dpo", "ipo", "simpo"] = "dpo"\nmix = ("sft", "grpo", "dpo")\n')
    assert algorithm_name_lists(planted) == [1]


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
    from tempering.pipeline.stages import stage_kinds

    assert undeclared_stage_inputs(stage_kinds()) == {}


def test_a_stage_kind_that_drops_a_declared_path_is_caught():
    from dataclasses import replace

    from tempering.pipeline.stages import stage_kinds

    planted = {"grpo": replace(stage_kinds()["grpo"], inputs=("tasks.source",))}
    assert undeclared_stage_inputs(planted) == {
        "grpo": {"heldout.tasks.source", "domains.*.tasks.source", "domains.*.heldout.source", "chat_template"}
    }


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
# The agent recipe runs the sequence for its RL phase; its expert-SFT phase, inside the
# components step, is a second Trainer of its own.
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


def sources(root: Path = SRC) -> dict[str, str]:
    """{path relative to the package root: source} of every module."""
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))}


def product_and_bench() -> dict[str, str]:
    """`sources()` plus every bench script as `bench/...`: bench calls the product's one copy too."""
    return {**sources(), **{f"bench/{k}": v for k, v in sources(ROOT / "bench").items()}}


# ------------------------------------------------------------ left padding, PAD_ID
def _len_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"


def _right_aligned_slice(node: ast.AST) -> bool:
    """`[W - n:]` or `[-len(s):]`: the slice that right-aligns a sequence in a row."""
    if not isinstance(node, ast.Slice) or node.upper is not None:
        return False
    low = node.lower
    if isinstance(low, ast.UnaryOp) and isinstance(low.op, ast.USub):
        return _len_call(low.operand)
    return isinstance(low, ast.BinOp) and isinstance(low.op, ast.Sub)


def left_pad_writers(files: dict[str, str]) -> list[str]:
    """Modules that assign a sequence into the right end of a tensor row (a left-padding implementation)."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Subscript):
                        parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
                        if any(_right_aligned_slice(p) for p in parts):
                            found.append(name)
    return sorted(set(found))


def pad_id_definitions(files: dict[str, str]) -> list[str]:
    """Modules that assign a module-level `PAD_ID`."""
    found = []
    for name, text in files.items():
        for node in ast.parse(text).body:
            targets = (
                node.targets
                if isinstance(node, ast.Assign)
                else [node.target]
                if isinstance(node, ast.AnnAssign)
                else []
            )
            if any(isinstance(t, ast.Name) and t.id == "PAD_ID" for t in targets):
                found.append(name)
    return found


LEFT_PAD_COPY = """
import torch
def pad_prompts(seqs, pad):
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad)
    for i, s in enumerate(seqs):
        ids[i, width - len(s) :] = torch.tensor(s)
    return ids
"""


def test_left_padding_is_implemented_once_in_data_padding():
    assert left_pad_writers(product_and_bench()) == ["data/padding.py"]


def test_a_planted_left_padding_copy_is_found():
    planted = {
        **sources(),
        "rollout/planted.py": LEFT_PAD_COPY,
        "agents/planted.py": "x[0, -len(s):] = s\n",
        "data/p.py": "m[i, w - n :] = 1\n",
    }
    assert left_pad_writers(planted) == ["agents/planted.py", "data/p.py", "data/padding.py", "rollout/planted.py"]


def test_pad_id_is_defined_once_in_data_padding():
    assert pad_id_definitions(product_and_bench()) == ["data/padding.py"]


def test_a_planted_pad_id_is_found():
    planted = {**sources(), "agents/planted.py": "PAD_ID: int = 0\n", "rollout/planted.py": "PAD_ID = 2\n"}
    assert sorted(pad_id_definitions(planted)) == ["agents/planted.py", "data/padding.py", "rollout/planted.py"]


def _row_prefix_slice(target: ast.AST) -> bool:
    """`x[i, :n]` or `x[i, : len(s)]`: a sequence written into the left end of a tensor row."""
    if not (isinstance(target, ast.Subscript) and isinstance(target.slice, ast.Tuple)):
        return False
    elts = target.slice.elts
    if len(elts) != 2 or isinstance(elts[0], ast.Slice):
        return False
    cut = elts[1]
    return isinstance(cut, ast.Slice) and cut.lower is None and cut.upper is not None and cut.step is None


def right_pad_writers(files: dict[str, str]) -> list[str]:
    """Modules that write sequences into the left end of tensor rows (a right-padding loop)."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign):
                targets = [t for tgt in node.targets for t in (tgt.elts if isinstance(tgt, ast.Tuple) else [tgt])]
                if any(_row_prefix_slice(t) for t in targets):
                    found.append(name)
    return sorted(set(found))


def pad_id_fallbacks(files: dict[str, str]) -> list[str]:
    """Modules with their own rule for a missing pad token: `tok.pad_token_id if ... else ...`
    or `tok.pad_token_id or ...`."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.IfExp, ast.BoolOp)):
                parts = [node.body, node.test] if isinstance(node, ast.IfExp) else node.values[:1]
                if any(isinstance(n, ast.Attribute) and n.attr == "pad_token_id" for p in parts for n in ast.walk(p)):
                    found.append(name)
    return sorted(set(found))


def test_right_padding_is_implemented_once_in_data_padding():
    """Completions, masks, per-token log-probs and drafts are right-padded by `data.padding.right_pad`."""
    assert right_pad_writers(product_and_bench()) == ["data/padding.py"]


def test_a_planted_right_padding_loop_is_found():
    planted = {
        **sources(),
        "rollout/planted.py": "for i, c in enumerate(cs):\n    lp[i, : len(c.logprobs)] = torch.tensor(c.logprobs)\n",
        "bench/x.py": "for i, (c, m) in enumerate(cs):\n    ids[i, : len(c)], mask[i, :n] = c, 1\n",
        "rollout/kv.py": "keys[slots, :, :n] = k[row, :, :n]\nout[r : r + 2, : p.shape[1]] = p\n",  # not a row fill
    }
    assert right_pad_writers(planted) == ["bench/x.py", "data/padding.py", "rollout/planted.py"]


def test_the_pad_id_rule_lives_in_data_padding():
    """Every engine, drafter, reward scorer and SFT batch pads with `data.padding.pad_id(tokenizer)`."""
    assert pad_id_fallbacks(product_and_bench()) == []
    assert "def pad_id(" in (SRC / "data" / "padding.py").read_text()


def test_a_planted_pad_id_fallback_is_found():
    planted = {
        "recipes/agent.py": "pad = tok.pad_token_id if tok.pad_token_id is not None else 0\n",
        "rollout/engine.py": "pad = t.pad_token_id or t.eos_token_id\n",
        "models/load.py": "if tok.pad_token_id is None:\n    tok.pad_token = tok.eos_token\n",  # sets it: no fallback
    }
    assert pad_id_fallbacks(planted) == ["recipes/agent.py", "rollout/engine.py"]


# ------------------------------------------------------------ refusals and text normalising
REFUSAL_OWNER = "verifiers/safety.py"
DECLINE_CUE = re.compile(r"(?i)\bcan(?:no|\W)?t\b|\bsorry\b|\bas an ai\b|\bdecline|\bdon\W?t know\b|\bunable to\b")
REGEX_SYNTAX = re.compile(r"\\b|\(\?|\\s|\|")


def refusal_detectors(files: dict[str, str]) -> list[str]:
    """Modules with a regex (a string constant in regex syntax) for a decline or "I don't know" cue."""
    found = []
    for name, text in files.items():
        tree = ast.parse(text)
        prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # docstrings
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
                if REGEX_SYNTAX.search(node.value) and DECLINE_CUE.search(node.value):
                    found.append(name)
    return sorted(set(found))


def test_refusals_are_detected_in_one_place():
    """Failure clustering and the `refusal` / `abstain` verifiers decide a reply with one detector each."""
    assert refusal_detectors(product_and_bench()) == [REFUSAL_OWNER]


def test_a_planted_refusal_detector_is_found():
    planted = {
        **sources(),
        "evals/planted.py": "import re\n_R = re.compile(r\"\\b(I can't|I'm sorry|as an AI)\\b\", re.I)\n",
        "bench/x.py": 'DECLINES = ["I can\'t help with that."]\n',  # a reply to train on, not a detector
    }
    assert refusal_detectors(planted) == ["evals/planted.py", REFUSAL_OWNER]


NORMALISER_OWNER = "data/textnorm.py"


def _joins_split(node: ast.AST) -> bool:
    """`" ".join(x.split())`: whitespace folded to single spaces."""
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "join"
        and bool(node.args)
        and isinstance(node.args[0], ast.Call)
        and getattr(node.args[0].func, "attr", None) == "split"
    )


def text_normalisers(files: dict[str, str]) -> list[str]:
    """Modules with a function that folds whitespace (`" ".join(x.split())`) and case (`casefold()`,
    or `lower()` of the joined text): a normaliser for comparing texts."""
    found = []
    for name, text in files.items():
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
            casefolds = any(c.func.attr == "casefold" for c in calls)
            lowers_joined = any(c.func.attr == "lower" and _joins_split(c.func.value) for c in calls)
            if any(_joins_split(c) for c in calls) and (casefolds or lowers_joined):
                found.append(name)
    return sorted(set(found))


def test_texts_are_normalised_for_comparison_in_one_place():
    """Exact answers, pair sides and the safety cues compare texts through `canonical_text`."""
    assert text_normalisers(product_and_bench()) == [NORMALISER_OWNER]


def test_a_planted_text_normaliser_is_found():
    planted = {
        **sources(),
        "verifiers/planted.py": "def _norm(text):\n    return ' '.join(text.split()).casefold()\n",
        "bench/x.py": "def key(s):\n    return ' '.join(s.split()).lower()\n",
        "evals/g.py": "def rule(t):\n    r = ' '.join(t.split())\n    return r.lower().startswith('no ')\n",  # no
        "errors.py": "def one_line(e):\n    return ' '.join(str(e).split())\n",  # no case folding
        "data/c.py": "def fold(t):\n    t = t.casefold()\n    return ' '.join(t.split())\n",
    }
    assert text_normalisers(planted) == ["bench/x.py", "data/c.py", NORMALISER_OWNER, "verifiers/planted.py"]


# ------------------------------------------------------------ top-p: rollout/engine.py top_p_cut
TOP_P_OWNER = "rollout/engine.py"


def top_p_copies(files: dict[str, str]) -> list[str]:
    """Modules with a function that sorts descending and takes a cumulative sum: a nucleus cut."""
    found = []
    for name, text in files.items():
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            called = {getattr(c.func, "attr", getattr(c.func, "id", None)) for c in calls}
            descending = any(
                getattr(c.func, "attr", getattr(c.func, "id", None)) in ("sort", "argsort", "topk")
                and any(k.arg in ("descending", "largest") for k in c.keywords)
                for c in calls
            )
            if descending and called & {"cumsum", "cumsum_"}:
                found.append(name)
    return sorted(set(found))


def test_top_p_is_cut_in_one_place():
    """The samplers and the speculative verifier's distribution keep the same tokens: one `top_p_cut`."""
    assert top_p_copies(product_and_bench()) == [TOP_P_OWNER]


def test_a_planted_top_p_copy_is_found():
    planted = {
        **sources(),
        "rollout/planted.py": (
            "def probs(p, top_p):\n"
            "    s, order = p.sort(dim=-1, descending=True)\n"
            "    return s.masked_fill(s.cumsum(dim=-1) - s >= top_p, 0.0)\n"
        ),
        "bench/x.py": "def f(p):\n    s, i = torch.sort(p, descending=True)\n    return torch.cumsum(s, 0)\n",
        "agents/credit.py": "def g(r):\n    return r.flip(0).cumsum(0)\n",  # a cumsum, no sort: not a cut
    }
    assert top_p_copies(planted) == ["bench/x.py", TOP_P_OWNER, "rollout/planted.py"]


# ------------------------------------------------------------ atomic writes
def atomic_writers(files: dict[str, str]) -> list[str]:
    """Modules that rename a file into place or fsync one: `os.replace`, `Path.replace(target)`, `os.fsync`.

    Directories (checkpoints, converted models) are published with `os.rename`, not counted here.
    """
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            attr, owner = node.func.attr, node.func.value
            on_os = isinstance(owner, ast.Name) and owner.id == "os"
            path_replace = attr == "replace" and len(node.args) == 1 and not node.keywords  # str.replace takes 2
            if path_replace or (on_os and attr in ("replace", "fsync")):
                found.append(name)
    return sorted(set(found))


def test_atomic_file_writes_live_in_tempering_atomic():
    assert atomic_writers(sources()) == ["atomic.py"]


def test_a_planted_atomic_write_is_found():
    planted = {
        **sources(),
        "evals/planted.py": "def save(tmp, path):\n    tmp.write_text('x')\n    tmp.replace(path)\n",
        "runs/planted.py": "import os\ndef save(fh, a, b):\n    os.fsync(fh.fileno())\n    os.replace(a, b)\n",
        "data/harmless.py": "def f(s):\n    return s.replace('a', 'b')\n",
    }
    assert atomic_writers(planted) == ["atomic.py", "evals/planted.py", "runs/planted.py"]


def _json_text(node: ast.AST) -> bool:
    """An expression that builds JSON text: `json.dumps(...)` or `model.model_dump_json(...)`."""
    return any(
        isinstance(n, ast.Call) and ast.unparse(n.func).endswith(("json.dumps", "model_dump_json"))
        for n in ast.walk(node)
    )


def json_record_writers(files: dict[str, str]) -> list[str]:
    """`file:line` of a JSON record written whole but not through `tempering.atomic`: `p.write_text(json.dumps(...))`,
    `json.dump(obj, fh)`, or JSON lines written to a handle opened with mode "w". Appending one event
    line to a log (mode "a": metrics, trajectory stores) is not writing a record whole."""
    found = []
    for name, text in files.items():
        if name == "atomic.py":
            continue
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                attr = node.func.attr
                if (attr == "write_text" and node.args and _json_text(node.args[0])) or (
                    attr == "dump" and ast.unparse(node.func.value) == "json"
                ):
                    found.append(f"{name}:{node.lineno}")
            if isinstance(node, ast.With):
                opened = [i.context_expr for i in node.items if isinstance(i.context_expr, ast.Call)]
                modes = [c for c in opened if "open" in (getattr(c.func, "attr", None), getattr(c.func, "id", None))]
                writes = any(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("w")
                    for c in modes
                    for a in [*c.args, *(k.value for k in c.keywords if k.arg == "mode")]
                )
                if writes and any(_json_text(b) for b in node.body):
                    found.append(f"{name}:{node.lineno}")
    return sorted(found)


def test_json_records_are_written_whole_through_tempering_atomic():
    """Gate verdicts, release records, summary.json, best-of-n records, markers, splits, reports: a
    reader (the release stage, the registry, a resumed run) never sees half of one."""
    assert json_record_writers(sources()) == []


def test_a_planted_json_record_write_is_found():
    planted = {
        **sources(),
        "pipeline/planted.py": "def gate(p, v):\n    p.write_text(json.dumps(v.to_dict(), indent=1))\n",
        "recipes/planted.py": (
            "def save(out, rows):\n"
            "    with Path(out).open('w', encoding='utf-8') as fh:\n"
            "        for r in rows:\n"
            "            fh.write(json.dumps(r) + '\\n')\n"
        ),
        "evals/planted.py": "def save(fh, r):\n    json.dump(r, fh)\n",
        "train/log.py": "def log(p, e):\n    with p.open('a') as fh:\n        fh.write(json.dumps(e) + '\\n')\n",
    }
    assert json_record_writers(planted) == ["evals/planted.py:2", "pipeline/planted.py:2", "recipes/planted.py:2"]


# ------------------------------------------------------------ number patterns
# a sign before a digit, a decimal part after one, a leading-dot decimal, digits with separators
NUMBER_REGEX = re.compile(r"(\[[-+]{2}\]\?|-\?)(\\d|\{|$)|\\d[+*]?\(\?:\\\.\\d|\\\.\\d[+*]|\\d\[\\d,\]")


def number_patterns(files: dict[str, str]) -> list[str]:
    """Modules with a string constant that is (part of) a regex for a number."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and NUMBER_REGEX.search(node.value):
                found.append(name)
    return sorted(set(found))


def test_number_patterns_live_in_tempering_numbers():
    assert number_patterns(sources()) == ["numbers.py"]


def test_planted_number_regexes_are_found():
    planted = {
        **sources(),
        "agents/a.py": 'import re\n_N = re.compile(r"-?\\d[\\d,]*(?:\\.\\d+)?")\n',
        "evals/b.py": 'P = r"^\\s*[-+]?\\d+\\s*$"\n',
        "config/c.py": 'P = r"\\d+(?:\\.\\d+)?"\n',
        "verifiers/d.py": 'P = rf"[+-]?{UNSIGNED}"\n',
        "models/e.py": 'P = r"^model\\.layers\\.(\\d+)\\.(.*)$"\n',  # a layer index, not a number answer
    }
    assert number_patterns(planted) == ["agents/a.py", "config/c.py", "evals/b.py", "numbers.py", "verifiers/d.py"]


# ------------------------------------------------------------ MoE routers
def router_finders(files: dict[str, str]) -> list[str]:
    """Modules that recognise a router by transformers' class name (the `TopKRouter` suffix)."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "TopKRouter" in node.value:
                if not _is_docstring(node, text):
                    found.append(name)
    return sorted(set(found))


def _is_docstring(node: ast.Constant, text: str) -> bool:
    return "\n" in node.value or len(node.value) > 40


def test_moe_routers_are_found_and_hooked_in_models_routing():
    """Load metrics, balance terms, the engine's routing record and router replay all reach the
    routers through models/routing.py, so a new MoE family is one edit there."""
    assert router_finders(sources()) == ["models/routing.py"]


def test_a_planted_router_lookup_is_found():
    planted = {
        **sources(),
        "train/planted.py": "def gates(m):\n    return [x for x in m.modules() if 'TopKRouter' in type(x).__name__]\n",
    }
    assert router_finders(planted) == ["models/routing.py", "train/planted.py"]


# ------------------------------------------------------------ python parsing
def ast_parsers(files: dict[str, str]) -> list[str]:
    """Modules that call `ast.parse` (or `parse` imported from `ast`) themselves."""
    found = []
    for name, text in files.items():
        tree = ast.parse(text)
        from_ast = {
            a.asname or a.name
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and n.module == "ast"
            for a in n.names
            if a.name == "parse"
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "parse"
                and isinstance(f.value, ast.Name)
                and f.value.id == "ast"
            ) or (isinstance(f, ast.Name) and f.id in from_ast):
                found.append(name)
    return sorted(set(found))


# the code judge runs alone inside the sandbox (stdlib only, one thread): it parses by itself
SANDBOX_SCRIPTS = ["verifiers/code_judge.py"]


def test_python_source_is_parsed_only_under_the_lock_in_pyast():
    assert ast_parsers(sources()) == ["pyast.py", *SANDBOX_SCRIPTS]


def test_a_planted_bare_ast_parse_is_found():
    planted = {
        **sources(),
        "agents/a.py": "import ast\ndef f(s):\n    return ast.parse(s)\n",
        "evals/b.py": "from ast import parse as p\nTREE = p('1')\n",
        "data/c.py": "import json\nX = json.loads('1')\n",
    }
    assert ast_parsers(planted) == ["agents/a.py", "evals/b.py", "pyast.py", *SANDBOX_SCRIPTS]


# ------------------------------------------------------------ a command's errors: cli/common.py run_command
BROAD = {"ValueError", "Exception", "BaseException"}


def broad_catches(files: dict[str, str]) -> list[str]:
    """`file:line` of each `except` in the commands that names ValueError, Exception or
    BaseException and does not re-raise: it would show a bug (torch's ValueError, say) as bad
    input. Only `run_command` in cli/common.py may catch so broadly."""
    found = []
    for name, text in files.items():
        if name == "cli/common.py" or not name.startswith("cli/"):
            continue
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.ExceptHandler) or node.type is None:
                continue
            caught = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            named = {c.id if isinstance(c, ast.Name) else getattr(c, "attr", None) for c in caught}
            reraises = any(isinstance(n, ast.Raise) and n.exc is None for n in ast.walk(node))
            if named & BROAD and not reraises:
                found.append(f"{name}:{node.lineno}")
    return sorted(found)


def test_commands_leave_bugs_to_run_command():
    assert broad_catches(sources()) == []


def test_a_planted_broad_catch_in_a_command_is_found():
    planted = {
        **sources(),
        "cli/a.py": "try:\n    run()\nexcept (KeyError, ValueError) as exc:\n    fail(str(exc))\n",
        "cli/b.py": "try:\n    run()\nexcept Exception:\n    cleanup()\n    raise\n",  # re-raised: not swallowed
        "cli/c.py": "try:\n    run()\nexcept UserError as exc:\n    fail(str(exc))\n",
        "recipes/d.py": "try:\n    run()\nexcept ValueError:\n    pass\n",  # not a command
    }
    assert broad_catches(planted) == ["cli/a.py:3"]


# --- what this CPU runs is read in one place: models/cpu_features.py ---

CPU_FEATURES_MODULE = "models/cpu_features.py"


def cpu_feature_reads(root: Path) -> list[str]:
    """Lines outside models/cpu_features.py that read the CPU's flags (a "/proc/cpuinfo" string)
    or call torch's own bf16 check (`_is_mkldnn_bf16_supported`); docstrings may name them."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).as_posix() == CPU_FEATURES_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Constant) and node.value == "/proc/cpuinfo") or (
                isinstance(node, ast.Attribute) and node.attr == "_is_mkldnn_bf16_supported"
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_cpu_features_are_read_only_in_cpu_features():
    """Every CPU-specific path asks `cpu_features.supports`, so the mask and the probes cover it."""
    assert cpu_feature_reads(SRC) == []
    assert "/proc/cpuinfo" in (SRC / CPU_FEATURES_MODULE).read_text(encoding="utf-8")


def test_a_planted_cpu_flag_read_is_caught(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / CPU_FEATURES_MODULE).write_text('open("/proc/cpuinfo")\n')
    (tmp_path / "fast.py").write_text('"""Reads /proc/cpuinfo."""\nflags = open("/proc/cpuinfo").read()\n')
    (tmp_path / "bf16.py").write_text("import torch\nok = torch.ops.mkldnn._is_mkldnn_bf16_supported()\n")
    assert cpu_feature_reads(tmp_path) == ["bf16.py:2", "fast.py:2"]


# ------------------------------------------------------------ the Trainer's pieces, the Tinker service too
OPTIMIZER_OWNER = "train/optimizer.py"
OPTIMIZER_CLASSES = {"Adam", "AdamW", "SGD", "AdamW8bit"}


def optimizer_constructions(files: dict[str, str]) -> list[str]:
    """`file:line` of each optimizer built by hand: a call of `torch.optim.<Class>` / `optim.<Class>`,
    or of an optimizer class by name (an import alias too)."""
    found = []
    for name, text in files.items():
        tree = ast.parse(text)
        names = set(OPTIMIZER_CLASSES) | {
            a.asname
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom)
            for a in n.names
            if a.asname
            if a.name in OPTIMIZER_CLASSES
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            by_module = isinstance(f, ast.Attribute) and ast.unparse(f.value).split(".")[-1] == "optim"
            if (isinstance(f, ast.Attribute) and by_module and f.attr[:1].isupper()) or (
                isinstance(f, ast.Name) and f.id in names
            ):
                found.append(f"{name}:{node.lineno}")
    return sorted(found, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def test_optimizers_are_built_only_by_build_optimizer():
    """The Trainer and the Tinker service (`temper tinker serve`) step the optimizer `train/optimizer.py`
    builds; Tinker's per-request AdamW settings are set on its param groups, not a second AdamW."""
    found = optimizer_constructions(sources())
    assert found and all(f.startswith(OPTIMIZER_OWNER + ":") for f in found), found


def test_a_planted_optimizer_construction_is_found():
    planted = {
        **sources(),
        "serve/planted.py": "import torch\ndef make(ps):\n    return torch.optim.AdamW(ps, lr=0.0)\n",
        "serve/alias.py": "from torch.optim import AdamW as A\nopt = A([])\n",
        "train/sched.py": "import torch\ns = torch.optim.lr_scheduler.LambdaLR(o, f)\n",  # a schedule, no optimizer
    }
    found = [f for f in optimizer_constructions(planted) if not f.startswith(OPTIMIZER_OWNER)]
    assert found == ["serve/alias.py:2", "serve/planted.py:3"]


CHECKPOINT_OWNER = "train/checkpoint.py"


def checkpoint_writers(files: dict[str, str]) -> list[str]:
    """Modules that save or load an optimizer's state themselves (`torch.save` / `torch.load` of
    anything named optim...) or name a checkpoint's optimizer file: a second checkpoint format."""
    found = []
    for name, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and node.value == "optimizer.pt":
                found.append(name)
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("torch.save", "torch.load"):
                if "optim" in " ".join(ast.unparse(a) for a in [*node.args, *(k.value for k in node.keywords)]):
                    found.append(name)
    return sorted(set(found))


def test_checkpoints_are_written_and_read_only_by_train_checkpoint():
    """A Trainer checkpoint and a Tinker save_state are one format: `write_checkpoint` / `load_checkpoint`."""
    assert checkpoint_writers(sources()) == [CHECKPOINT_OWNER]


def test_a_planted_checkpoint_format_is_found():
    planted = {
        **sources(),
        "serve/planted.py": "import torch\ndef save(t, out):\n    torch.save(t.optimizer.state_dict(), out / 'o.pt')\n",
        "serve/reader.py": "import torch\ndef load(src):\n    return torch.load(src / 'optimizer.pt', weights_only=True)\n",
        "train/cache.py": "import torch\ndef keep(logps, tmp):\n    torch.save(logps, tmp)\n",  # no optimizer
    }
    assert checkpoint_writers(planted) == ["serve/planted.py", "serve/reader.py", CHECKPOINT_OWNER]


LORA_TARGETS_OWNER = "models/lora.py"


def lora_target_pickers(files: dict[str, str]) -> list[str]:
    """Modules with a function that walks `named_modules()` and picks the Linear layers: a second
    choice of the layers LoRA adapts."""
    found = []
    for name, text in files.items():
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            walks = any(isinstance(c.func, ast.Attribute) and c.func.attr == "named_modules" for c in calls)
            linear = any(
                isinstance(c.func, ast.Name) and c.func.id == "isinstance" and "Linear" in ast.unparse(c.args[1])
                for c in calls
                if len(c.args) == 2
            ) or any(isinstance(n, ast.Attribute) and n.attr == "Linear" for n in ast.walk(fn))
            if walks and linear:
                found.append(name)
    return sorted(set(found))


def test_lora_targets_are_chosen_only_in_models_lora():
    """ "all-linear" and the Tinker service's train_attn / train_mlp / train_unembed are one function,
    `models/lora.py: linear_targets`."""
    assert lora_target_pickers(sources()) == [LORA_TARGETS_OWNER]


def test_a_planted_lora_target_choice_is_found():
    planted = {
        **sources(),
        "serve/planted.py": (
            "import torch\n"
            "def targets(model, attn):\n"
            "    return sorted({n.rsplit('.', 1)[-1] for n, m in model.named_modules()\n"
            "                   if isinstance(m, torch.nn.Linear) and (not attn or 'attn' in n)})\n"
        ),
        "models/parts.py": "def parts(model):\n    return {n for n, _ in model.named_modules() if n.endswith('proj')}\n",
    }
    assert lora_target_pickers(planted) == [LORA_TARGETS_OWNER, "serve/planted.py"]


# ------------------------------------------------------------ token ids against the embedding: batches.py
TOKEN_GUARD_OWNER = "batches.py"


def embedding_size_reads(files: dict[str, str]) -> list[str]:
    """`file:line` of each read of an embedding's `num_embeddings` outside batches.py: a second bound
    that token ids would be checked against."""
    found = []
    for name, text in files.items():
        if name == TOKEN_GUARD_OWNER:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr == "num_embeddings":
                found.append(f"{name}:{node.lineno}")
    return sorted(found)


def test_token_ids_are_checked_against_the_embedding_only_in_batches_py():
    """The Tinker service, the engines, the OpenAI-compatible server and the Trainer all call
    `batches.check_token_ids` with `batches.embedding_rows(model)`; no second bound, no second message."""
    assert embedding_size_reads(sources()) == []
    assert "num_embeddings" in (SRC / TOKEN_GUARD_OWNER).read_text(encoding="utf-8")


def test_a_planted_embedding_bound_is_found():
    planted = {
        **sources(),
        "serve/planted.py": "def ok(ids, m):\n    return max(ids) < m.get_input_embeddings().num_embeddings\n",
        "rollout/planted.py": "def rows(m):\n    return m.config.vocab_size\n",  # the config's, not an embedding's
    }
    assert embedding_size_reads(planted) == ["serve/planted.py:2"]


# --- waiting on workers: fault points only through faults.point, each point placed in worker code ---


def fault_point_findings(root: Path) -> list[str]:
    """What breaks the row: a module other than faults.py (and scale/runtime.py, which forwards
    the variables to Ray actors) reading the fault environment, or a point of `faults.POINTS`
    that no worker module names (a point the battery could never fire)."""
    from tempering import faults

    readers = {"faults.py", "scale/runtime.py"}
    texts = {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.py"))}
    found = [
        f"{path} reads {env}"
        for path, text in texts.items()
        for env in (faults.ENV, faults.DIR_ENV)
        if env in text and path not in readers
    ]
    placed = {
        name for path, text in texts.items() if path != "faults.py" for name in faults.POINTS if f'"{name}"' in text
    }
    found += [f"fault point {name!r} is placed nowhere" for name in faults.POINTS if name not in placed]
    return found


def test_fault_points_are_placed_and_only_faults_reads_their_environment():
    assert fault_point_findings(SRC) == []


def test_a_planted_fault_reader_and_an_unplaced_point_are_caught(tmp_path, monkeypatch):
    from tempering import faults

    (tmp_path / "faults.py").write_text("ENV = 'TEMPERING_FAULTS'\n")
    (tmp_path / "worker.py").write_text("import os\nos.environ.get('TEMPERING_FAULTS')\nfaults.point(\"engine\")\n")
    monkeypatch.setattr(faults, "POINTS", ("engine", "nowhere"))
    assert fault_point_findings(tmp_path) == [
        "worker.py reads TEMPERING_FAULTS",
        "fault point 'nowhere' is placed nowhere",
    ]
