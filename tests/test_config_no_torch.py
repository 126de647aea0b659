"""Config validation imports no torch and runs no user code.

In a fresh interpreter: every shipped example config validates (training and data configs
through `tempering.config`, pipelines through `pipeline.plan`, suites through `evals.suite`), a
GRPO config naming `loss: gspo` and a plug-in module validates, and afterwards torch is not
imported and the plug-in has not run. Names are checked against the built-ins read from their
source (`algorithms.builtin_names`), which a second test keeps equal to what importing them
registers.
"""

import json
import subprocess
import sys
from pathlib import Path

from tempering import algorithms

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

KIND = {  # each top-level example: the command (stage kind) whose config it is; `stages:` files are pipelines
    "distill_draft.yaml": "distill",
    "distill_draft_more.yaml": "distill",
    "distill_draft_onpolicy.yaml": "distill",
    "dpo.yaml": "dpo",
    "grpo_arith.yaml": "grpo",
    "merge.yaml": "merge",
    "mix.yaml": "data.mix",
    "pairs.yaml": "data.pairs",
    "rm.yaml": "rm",
    "sft_demo.yaml": "sft",
    "stratify.yaml": "data.stratify",
    "synth.yaml": "data.synth",
    "synth_draft.yaml": "data.synth",
    "vision_grpo.yaml": "grpo",
    "vision_lora.yaml": "vision_sft",
    "vision_projector.yaml": "vision_sft",
    "agent/agent_arith.yaml": "agent",
    "agent/agent_workspace_t1.yaml": "agent",
}

SCRIPT = """
import json, sys
from pathlib import Path

import yaml

import tempering.config
from tempering.config import GRPOConfig, load_config
from tempering.evals.suite import load_suite
from tempering.pipeline.plan import load_plan
from tempering.pipeline.stages import stage_kinds

examples, kinds, plugin_dir = Path(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
checked = []
for path in sorted(examples.rglob("*.yaml")):
    rel = str(path.relative_to(examples))
    if rel.startswith("suites/"):
        load_suite(path)
    elif "stages" in (yaml.safe_load(path.read_text()) or {}):
        load_plan(path)
    else:
        load_config(stage_kinds()[kinds[rel]].config, path)
    checked.append(rel)
sys.path.insert(0, plugin_dir)
cfg = load_config(GRPOConfig, None, ["train.steps=1", "grpo.loss=gspo", "grpo.plugins=[planted_rl]", "grpo.advantage=mine"])
assert cfg.grpo.loss == "gspo"
print(json.dumps({"checked": checked, "torch": "torch" in sys.modules, "plugin": "planted_rl" in sys.modules}))
"""


def test_validating_every_example_imports_no_torch_and_runs_no_plugin(tmp_path):
    (tmp_path / "planted_rl.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').write('ran')\n")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(EXAMPLES), json.dumps(KIND), str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(result["checked"]) == sorted(str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml"))
    assert len(result["checked"]) >= 30
    assert result["torch"] is False
    assert result["plugin"] is False and not (tmp_path / "ran").exists()


def test_the_builtin_names_read_from_source_are_what_importing_registers():
    algorithms.load()
    registered = {
        key: algorithms.keyword_settings(a.fn)
        for key, a in algorithms.REGISTRY.items()
        if a.fn.__module__ in algorithms.BUILTIN_MODULES
    }
    assert algorithms.builtin_names() == registered
    assert algorithms.builtin_names()[("divergence", "jsd")] == ("beta",)
