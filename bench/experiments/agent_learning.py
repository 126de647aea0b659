"""Does the default model learn to use tools (docs/agents.md, "Measured")? Held-out completion
before and after agent training (expert SFT, then GRPO), per seed and pooled, with paired CIs.

    python bench/experiments/agent_learning.py --config examples/agent/agent_arith.yaml --seeds 0 1 2 --out-root runs/agent-learning
    python bench/experiments/agent_learning.py --collect runs/agent-learning/s0 runs/agent-learning/s1 ...   # only aggregate
    python bench/experiments/agent_learning.py --config examples/agent/agent_workspace_t1.yaml --title "workspace tier 1" \
        --out bench/results/agent_workspace_t1.json          # workspace tier 1 (SFT then RL)

Each seed is one `temper agent` run (seeding SFT order, LoRA init and RL sampling). Pooled:
per task, the success averaged over seeds, then a paired bootstrap over tasks (after - before).
Writes bench/results/agent_learning.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402


def run_seed(config: str, out_root: str, seed: int) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "tempering.cli",
        "agent",
        config,
        "--out",
        out_root,
        "--name",
        f"s{seed}",
        "--set",
        f"train.seed={seed}",
        "--set",
        f"sft.seed={seed}",
    ]
    subprocess.run(cmd, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return Path(out_root) / f"s{seed}"


def collect(run_dirs: list[Path]) -> dict:
    from tempering.evals.stats import paired_bootstrap

    seeds, pooled = [], {}
    for run in run_dirs:
        s = json.loads((run / "summary.json").read_text())
        cfg = json.loads((run / "run_config.json").read_text())
        row = {"run": str(run), "seed": cfg["train"]["seed"], "seconds_rl": s["seconds"], "sft": s.get("sft")}
        for suite, gain in s["gain"].items():
            phases = {
                k: {t: v["completion_rate"] for t, v in s[k][suite].items() if t not in ("success", "unsafe")}
                for k in ("before", "after_sft", "after")
                if k in s
            }
            row[suite] = {"completion": phases, "gain": gain, "gain_rl_only": s.get("gain_rl_only", {}).get(suite)}
            for phase in ("before", "after_sft", "after"):
                if phase in s:
                    for task, ok in s[phase][suite]["success"].items():
                        pooled.setdefault(suite, {}).setdefault(phase, {}).setdefault(task, []).append(float(ok))
        seeds.append(row)
    out = {"seeds": seeds, "pooled": {}}
    for suite, phases in pooled.items():
        tasks = sorted(phases["before"])
        res = {}
        for a, b in (("before", "after"), ("before", "after_sft"), ("after_sft", "after")):
            if a in phases and b in phases:
                cmp = paired_bootstrap([phases[a][t] for t in tasks], [phases[b][t] for t in tasks])
                res[f"{b}_minus_{a}"] = cmp.to_dict()
        res["completion"] = {p: sum(sum(v) / len(v) for v in per.values()) / len(per) for p, per in phases.items()}
        out["pooled"][suite] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(ROOT / "examples" / "agent" / "agent_arith.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out-root", default="runs/agent-learning")
    ap.add_argument("--collect", nargs="*", help="Only aggregate these finished run dirs.")
    ap.add_argument("--out", default=str(RESULTS / "agent_learning.json"))
    ap.add_argument("--title", default="agent learning (tool use)")
    ap.add_argument("--note", default="", help="Appended to the JSON's note (e.g. what else ran alongside).")
    args = ap.parse_args()
    runs = (
        [Path(p) for p in args.collect]
        if args.collect
        else [run_seed(args.config, args.out_root, s) for s in args.seeds]
    )
    result = {
        "benchmark": args.title,
        "config": args.config,
        "note": "2 shared cores, precision auto (bf16); other agents' work ran at nice 19 alongside" + args.note,
        **collect(runs),
    }
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["pooled"], indent=1))


if __name__ == "__main__":
    main()
