"""Dedup and decontamination quality on labelled synthetic sets, and decontamination at scale.

    flock /work/wt/bench.lock python bench/throughput/data.py            # -> bench/results/data.json
    python bench/throughput/data.py --quick                              # small sizes, no result file

1. Near duplicates: base documents, planted near duplicates (word edits, re-casing and
   punctuation noise, measured exact Jaccard of 5-word shingles in [0.8, 1.0)), exact copies,
   and hard negatives (heavier edits, Jaccard in [0.45, 0.78); documents sharing a long
   boilerplate header). `data.dedup` at threshold 0.8; precision and recall of the dropped rows.
2. Decontamination: a suite of tasks that all start with one shared instruction header (a
   private part included), two of them quoting a disclaimer that many training rows also
   hold; training rows with planted contamination of four kinds (exact, re-wrapped with a
   line break every 8 words, case/punctuation changed, embedded in a longer document) and
   hard negatives (the header with other content, the disclaimer, a task's words shuffled).
   Recall per kind, precision overall and per kind, and whether the right task was named.
3. Scale: 100k and 1M synthetic rows of about 200 words, every 1000th a planted contaminated
   row, decontaminated (read, match, write the kept rows) each in its own process;
   seconds, rows/s, peak RSS, every planted row found, and the time ratio 1M / 100k.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for _shared
from _shared.paths import RESULTS, ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "src"))

from tempering.data.dedup import Deduper, jaccard, shingle_set  # noqa: E402
from tempering.data.textnorm import normalize  # noqa: E402

HEADER = (
    "Read the question below carefully and answer it with a single number only; do not show any "
    "working and put the final answer on the last line."
)
DISCLAIMER = (
    "This material is provided for educational purposes only and may be freely copied and shared "
    "provided that this notice is kept intact in every copy."
)
KINDS = ("exact", "rewrapped", "case_punct", "embedded")
PUNCT = [".", ",", ";", ":", "!", "?", " -", " --", ""]


# ---------------------------------------------------------------------------- text


def vocabulary(rng: random.Random, size: int = 20000) -> tuple[list[str], list[float]]:
    """Pseudo-words with Zipf weights (cumulative), so common words repeat as in real text."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = list(dict.fromkeys("".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(size)))
    cum, total = [], 0.0
    for i in range(len(words)):
        total += 1.0 / (i + 1) ** 1.05
        cum.append(total)
    return words, cum


class Writer:
    """Random sentences over the vocabulary."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.words, self.cum = vocabulary(random.Random(0))

    def words_(self, k: int) -> list[str]:
        return self.rng.choices(self.words, cum_weights=self.cum, k=k)

    def text(self, k: int) -> str:
        words, out, i = self.words_(k), [], 0
        while i < len(words):
            n = self.rng.randint(6, 16)
            sent = words[i : i + n]
            sent[0] = sent[0].capitalize()
            if len(sent) > 6 and self.rng.random() < 0.4:
                sent[3] += ","
            out.append(" ".join(sent) + self.rng.choice(".....?!"))
            i += n
        return " ".join(out)


def rewrap(text: str, every: int = 8) -> str:
    words = text.split()
    return "\n".join(" ".join(words[i : i + every]) for i in range(0, len(words), every))


def case_punct(rng: random.Random, text: str) -> str:
    """Re-case every word at random and strip, swap or add punctuation between words."""
    out = []
    for word in text.split():
        core = "".join(c for c in word if c.isalnum())
        if not core:
            continue
        core = rng.choice([core.upper(), core.lower(), core.capitalize(), core])
        out.append(core + rng.choice(PUNCT))
    return " ".join(out)


# ---------------------------------------------------------------------------- 1. near duplicates


def _edit(rng: random.Random, w: Writer, words: list[str], edits: int) -> list[str]:
    words = list(words)
    for _ in range(edits):
        i = rng.randrange(len(words))
        op = rng.random()
        if op < 0.6:
            words[i] = w.words_(1)[0]
        elif op < 0.8:
            words.insert(i, w.words_(1)[0])
        elif len(words) > 20:
            del words[i]
    return words


def near_dup_set(n_base: int, seed: int = 1) -> tuple[list[dict], dict[str, str]]:
    """Rows in reading order and `truth`: dropped-row id -> id of the row it duplicates."""
    rng, w = random.Random(seed), Writer(seed)
    base = [{"id": f"base-{i}", "text": w.text(rng.randint(100, 220))} for i in range(n_base)]
    shingles = {r["id"]: shingle_set(normalize(r["text"]), 5) for r in base}
    truth: dict[str, str] = {}
    later: list[dict] = []
    sims: dict[str, list[float]] = {"near": [], "negative": []}

    def derived(kind: str, lo: float, hi: float, edits: tuple[int, int]) -> None:
        while True:
            src = rng.choice(base)
            words = _edit(rng, w, src["text"].split(), rng.randint(*edits))
            text = case_punct(rng, " ".join(words)) if rng.random() < 0.5 else " ".join(words)
            sim = jaccard(shingle_set(normalize(text), 5), shingles[src["id"]])
            if lo <= sim < hi:
                row_id = f"{kind}-{len(later)}"
                later.append({"id": row_id, "text": text})
                sims["near" if kind == "near" else "negative"].append(sim)
                if kind == "near":
                    truth[row_id] = src["id"]
                return

    for _ in range(n_base // 4):
        derived("near", 0.8, 1.0, (1, 4))
    for _ in range(n_base // 4):
        derived("hardneg", 0.45, 0.78, (6, 16))
    for i in range(n_base // 10):  # exact copies after normalisation: re-cased, re-wrapped
        src = rng.choice(base)
        later.append({"id": f"copy-{i}", "text": rewrap(src["text"].upper(), 7)})
        truth[f"copy-{i}"] = src["id"]
    header = w.text(60)
    for i in range(n_base // 10):  # one long shared header, different bodies
        later.append({"id": f"boiler-{i}", "text": header + " " + w.text(rng.randint(80, 160))})
    rng.shuffle(later)
    return base + later, truth, sims


def bench_near_dups(n_base: int) -> dict:
    rows, truth, sims = near_dup_set(n_base)
    deduper = Deduper(threshold=0.8, num_perm=128, shingle=5, seed=1)
    ids = [r["id"] for r in rows]
    dropped: dict[str, str] = {}
    start = time.perf_counter()
    for r in rows:
        d = deduper.add(normalize(r["text"]))
        if d.kind != "kept":
            dropped[r["id"]] = ids[d.of]
    seconds = time.perf_counter() - start
    tp = sum(1 for r in dropped if r in truth)
    # the boilerplate-header rows share most of their text with the first of them: count how
    # similar they really are, so a reader can see they are negatives by the threshold's rule
    return {
        "near_dup_rows": len(rows),
        "near_dup_planted": len(truth),
        "near_dup_planted_near": sum(1 for k in truth if k.startswith("near")),
        "near_dup_planted_exact": sum(1 for k in truth if k.startswith("copy")),
        "near_dup_hard_negatives": sum(1 for r in rows if r["id"].startswith(("hardneg", "boiler"))),
        "near_dup_planted_jaccard_min": round(min(sims["near"]), 4),
        "near_dup_hard_negative_jaccard_max": round(max(sims["negative"]), 4),
        "near_dup_precision": tp / max(1, len(dropped)),
        "near_dup_recall": tp / len(truth),
        "near_dup_right_keeper": sum(1 for r, k in dropped.items() if truth.get(r) == k) / max(1, tp),
        "near_dup_false_positives": sorted(r for r in dropped if r not in truth)[:20],
        "near_dup_missed": sorted(r for r in truth if r not in dropped)[:20],
        "near_dup_threshold": 0.8,
        "near_dup_lsh_bands": list(deduper.bands),
        "near_dup_rows_per_s": len(rows) / seconds,
    }


def dedup_worker(data: Path, out: Path) -> None:
    """One timed streaming dedup pass in this process (read, decide, write kept rows); a JSON line."""
    from tempering.atomic import AtomicJsonl
    from tempering.data.dedup import dedup_rows
    from tempering.data.streams import stream_rows

    wall, cpu = time.perf_counter(), time.process_time()
    with AtomicJsonl(out, sidecar=True) as writer:
        report = dedup_rows(((r["id"], r) for _, r, _ in stream_rows(data)), Deduper(), writer.write)
    print(
        json.dumps(
            {
                "rows": report.rows,
                "kept": report.kept,
                "dropped_ids": report.dropped_ids,
                "seconds": time.perf_counter() - wall,
                "cpu_seconds": time.process_time() - cpu,
                "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
            }
        )
    )


def bench_dedup_scale(rows: int, folder: Path) -> dict:
    """`rows` documents of ~200 words, every 20th a near copy (2 substitutions) of an earlier one."""
    rng, w = random.Random(5), Writer(5)
    data, planted, texts = folder / "dedup_scale.jsonl", [], []
    with data.open("w") as fh:
        for i in range(rows):
            if i % 20 == 19:
                words = texts[rng.randrange(len(texts))].split()
                for _ in range(2):
                    words[rng.randrange(len(words))] = "edited"
                text = " ".join(words)
                planted.append(f"d{i}")
            else:
                text = w.text(rng.randint(170, 230))
                if len(texts) < 5000:  # sources for the near copies
                    texts.append(text)
            fh.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    proc = subprocess.run(
        [sys.executable, __file__, "--dedup-worker", str(data), str(folder / "kept.jsonl")],
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    data.unlink()
    return {
        "dedup_scale_rows": rows,
        "dedup_scale_planted": len(planted),
        "dedup_scale_planted_found": len(set(planted) & set(got["dropped_ids"])),
        "dedup_scale_other_dropped": len(set(got["dropped_ids"]) - set(planted)),
        "dedup_scale_cpu_seconds": got["cpu_seconds"],
        "dedup_scale_wall_seconds": got["seconds"],
        "dedup_scale_rows_per_cpu_s": rows / got["cpu_seconds"],
        "dedup_scale_peak_rss_gb": got["peak_rss_gb"],
    }


# ---------------------------------------------------------------------------- 2. decontamination quality


def suite_tasks(n: int, seed: int = 2) -> list[dict]:
    rng, w = random.Random(seed), Writer(seed)
    tasks = []
    for i in range(n):
        short = i % 4 == 2  # a question shorter than one 13-gram once the shared header is cut away
        question = w.text(rng.randint(6, 12) if short else rng.randint(20, 60))
        if i in (5, 17):  # two tasks quote the disclaimer that many training rows also hold
            question += " " + DISCLAIMER
        tasks.append(
            {
                "id": f"t{i}",
                "prompt": HEADER + " " + question,
                "question": question,
                "short": short,
                "private": i % 3 == 0,
            }
        )
    return tasks


def write_suite(tasks: list[dict], folder: Path) -> tuple[Path, Path]:
    public, private = folder / "suite_public.jsonl", folder / "suite_private.jsonl"
    for path, flag in ((public, False), (private, True)):
        path.write_text(
            "".join(json.dumps({"id": t["id"], "prompt": t["prompt"]}) + "\n" for t in tasks if t["private"] == flag)
        )
    return public, private


def contaminated(rng: random.Random, w: Writer, task: dict, kind: str, bare: bool = False) -> str:
    """A copy of the task disguised as `kind`; `bare`: of its question alone, without the suite's header."""
    text = task["question"] if bare else task["prompt"]
    if kind == "rewrapped":
        return rewrap(text)
    if kind == "case_punct":
        return case_punct(rng, text)
    if kind == "embedded":
        inner = rewrap(text) if rng.random() < 0.5 else text
        return w.text(rng.randint(100, 250)) + "\n\n" + inner + "\n\n" + w.text(rng.randint(50, 200))
    return text


def decontam_set(tasks: list[dict], per_kind: int, clean: int, seed: int = 3) -> list[dict]:
    rng, w = random.Random(seed), Writer(seed)
    rows = []
    short = [t for t in tasks if t["short"]]
    for kind in KINDS:
        for i in range(per_kind):
            # every kind holds short tasks and copies of the bare question (a leak rarely keeps the header)
            task, bare = rng.choice(short if i % 4 == 0 else tasks), i % 2 == 0
            rows.append(
                {
                    "id": f"{kind}-{i}",
                    "label": kind,
                    "task": task["id"],
                    "short": task["short"],
                    "messages": [
                        {"role": "user", "content": contaminated(rng, w, task, kind, bare)},
                        {"role": "assistant", "content": str(rng.randint(1, 999))},
                    ],
                }
            )
    negatives = {
        "neg_header": lambda: HEADER + " " + w.text(rng.randint(20, 60)),
        "neg_disclaimer": lambda: w.text(rng.randint(30, 120)) + " " + DISCLAIMER + " " + w.text(rng.randint(0, 60)),
        "neg_shuffled": lambda: " ".join(rng.sample(t := rng.choice(tasks)["prompt"].split(), len(t))),
    }
    for kind, make in negatives.items():
        rows += [{"id": f"{kind}-{i}", "label": kind, "text": make()} for i in range(per_kind)]
    rows += [{"id": f"clean-{i}", "label": "clean", "text": w.text(rng.randint(50, 250))} for i in range(clean)]
    rng.shuffle(rows)
    return rows


def bench_decontam(n_tasks: int, per_kind: int, clean: int, folder: Path) -> dict:
    from tempering.evals.contamination import NgramIndex

    tasks = suite_tasks(n_tasks)
    public, private = write_suite(tasks, folder)
    index = NgramIndex()
    index.add_file("bench_public", public)
    index.add_file("bench_private", private, private=True)
    rows = decontam_set(tasks, per_kind, clean)
    flagged = {}
    for row in rows:
        found = index.matches({k: v for k, v in row.items() if k not in ("label", "task", "short")})
        if found:
            flagged[row["id"]] = found
    label = {r["id"]: r["label"] for r in rows}
    task_of = {r["id"]: r.get("task") for r in rows}
    false_pos = [r for r in flagged if label[r] not in KINDS]
    out: dict = {
        "decontam_tasks": n_tasks,
        "decontam_rows": len(rows),
        "decontam_positives_per_kind": per_kind,
        "decontam_boilerplate_grams": index.boilerplate_grams,
        "decontam_unindexed_tasks": len(index.unindexed),
    }
    for kind in KINDS:
        hit = [r for r in flagged if label[r] == kind]
        out[f"decontam_recall_{kind}"] = len(hit) / per_kind
        short_rows = [r["id"] for r in rows if r["label"] == kind and r["short"]]
        out[f"decontam_recall_{kind}_short"] = sum(1 for r in short_rows if r in flagged) / max(1, len(short_rows))
        out[f"decontam_precision_{kind}"] = len(hit) / max(1, len(hit) + len(false_pos))
    true_pos = [r for r in flagged if label[r] in KINDS]
    out["decontam_precision"] = len(true_pos) / max(1, len(flagged))
    out["decontam_right_task"] = sum(1 for r in true_pos if task_of[r] in {m.task_id for m in flagged[r]}) / max(
        1, len(true_pos)
    )
    for kind in ("neg_header", "neg_disclaimer", "neg_shuffled", "clean"):
        out[f"decontam_false_positives_{kind}"] = sum(1 for r in false_pos if label[r] == kind)
    out["decontam_missed"] = sorted(r for r in label if label[r] in KINDS and r not in flagged)[:20]
    # ablation: the plain any-13-gram rule (no boilerplate filter, no coverage rule) on the same rows
    plain = NgramIndex(boilerplate_tasks=10**9, min_coverage=1e-9)
    plain.add_file("bench_public", public)
    plain.add_file("bench_private", private, private=True)
    plain_flagged = [
        r["id"] for r in rows if plain.matches({k: v for k, v in r.items() if k not in ("label", "task", "short")})
    ]
    out["decontam_precision_without_guards"] = sum(1 for r in plain_flagged if label[r] in KINDS) / max(
        1, len(plain_flagged)
    )
    out["decontam_false_positives_without_guards"] = sum(1 for r in plain_flagged if label[r] not in KINDS)
    return out


# ---------------------------------------------------------------------------- 3. scale


def write_scale_file(path: Path, rows: int, tasks: list[dict], every: int = 1000, seed: int = 4) -> list[str]:
    """`rows` rows of ~200 words; every `every`-th is a planted contaminated row. Planted ids."""
    rng, w = random.Random(seed), Writer(seed)
    planted = []
    with path.open("w") as fh:
        for i in range(rows):
            if i % every == every - 1:
                kind = KINDS[(i // every) % len(KINDS)]
                text = contaminated(rng, w, rng.choice(tasks), kind)
                planted.append(f"plant-{i}")
                fh.write(json.dumps({"id": f"plant-{i}", "text": text}) + "\n")
            else:
                fh.write(json.dumps({"id": f"r{i}", "text": w.text(rng.randint(170, 230))}) + "\n")
    return planted


def scale_worker(data: Path, public: Path, private: Path, out: Path) -> None:
    """One timed decontamination in this process; prints a JSON line."""
    from tempering.evals.contamination import NgramIndex, decontaminate

    start = time.perf_counter()
    index = NgramIndex()
    index.add_file("bench_public", public)
    index.add_file("bench_private", private, private=True)
    _ = index.unindexed  # build the sorted index now, outside the timed scan
    built, cpu_built = time.perf_counter(), time.process_time()
    report = decontaminate(index, data, out)
    done, cpu_done = time.perf_counter(), time.process_time()
    print(
        json.dumps(
            {
                "rows": report.rows,
                "kept": report.kept,
                "removed_ids": report.removed_ids,
                "index_seconds": built - start,
                "seconds": done - built,
                "cpu_seconds": cpu_done - cpu_built,
                "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
            }
        )
    )


def run_worker(data: Path, public: Path, private: Path, folder: Path) -> dict:
    out = folder / "kept.jsonl"
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", str(data), str(public), str(private), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    out.unlink(missing_ok=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_scale(sizes: tuple[int, int], folder: Path, repeats_small: int) -> dict:
    tasks = suite_tasks(300)
    public, private = write_suite(tasks, folder)
    result: dict = {"scale_rows": list(sizes), "scale_planted_every": 1000}
    runs = {}
    for size in sizes:
        data = folder / f"scale_{size}.jsonl"
        t0 = time.perf_counter()
        planted = write_scale_file(data, size, tasks)
        result[f"scale_generate_seconds_{size}"] = time.perf_counter() - t0
        result[f"scale_file_gb_{size}"] = data.stat().st_size / 1024**3
        attempts = [run_worker(data, public, private, folder) for _ in range(repeats_small if size == sizes[0] else 1)]
        data.unlink()
        runs[size] = attempts
        best = sorted(attempts, key=lambda a: a["cpu_seconds"])[len(attempts) // 2]  # the median run
        result[f"scale_cpu_seconds_{size}"] = best["cpu_seconds"]
        result[f"scale_wall_seconds_{size}"] = best["seconds"]
        result[f"scale_cpu_seconds_all_runs_{size}"] = [a["cpu_seconds"] for a in attempts]
        result[f"scale_wall_seconds_all_runs_{size}"] = [a["seconds"] for a in attempts]
        result[f"scale_rows_per_s_{size}"] = size / best["seconds"]
        result[f"scale_rows_per_cpu_s_{size}"] = size / best["cpu_seconds"]
        result[f"scale_peak_rss_gb_{size}"] = max(a["peak_rss_gb"] for a in attempts)
        result[f"scale_planted_{size}"] = len(planted)
        result[f"scale_planted_found_{size}"] = len(set(planted) & set(best["removed_ids"]))
        result[f"scale_false_positives_{size}"] = len(set(best["removed_ids"]) - set(planted))
        result[f"scale_index_seconds_{size}"] = best["index_seconds"]
    small, large = sizes
    # cost = CPU seconds of the scanning process: on a host shared with other jobs, wall time also
    # measures their load; the wall-clock ratio is reported beside it
    result["scale_time_ratio_1m_over_100k"] = (
        result[f"scale_cpu_seconds_{large}"] / result[f"scale_cpu_seconds_{small}"]
    )
    result["scale_wall_time_ratio_1m_over_100k"] = (
        result[f"scale_wall_seconds_{large}"] / result[f"scale_wall_seconds_{small}"]
    )
    result["scale_rows_per_s"] = result[f"scale_rows_per_s_{large}"]
    result["peak_rss_gb"] = result[f"scale_peak_rss_gb_{large}"]
    result["scale_every_planted_found"] = all(
        result[f"scale_planted_found_{s}"] == result[f"scale_planted_{s}"] for s in sizes
    )
    return result


def machine_load() -> dict:
    top = subprocess.run(["ps", "-eo", "pcpu,args", "--sort=-pcpu", "--no-headers"], capture_output=True, text=True)
    return {
        "loadavg": list(os.getloadavg()),
        "cpus": os.cpu_count(),
        "top_processes": [line.strip()[:120] for line in top.stdout.splitlines()[:6]],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="small sizes, print only")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--dedup-worker", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--skip-scale", action="store_true")
    args = parser.parse_args()
    if args.worker:
        scale_worker(*map(Path, args.worker))
        return
    if args.dedup_worker:
        dedup_worker(*map(Path, args.dedup_worker))
        return
    result: dict = {
        "bench": "data",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_before": machine_load(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        folder = Path(tmp)
        result.update(bench_near_dups(400 if args.quick else 2000))
        print({k: v for k, v in result.items() if k.startswith("near_dup_") and not isinstance(v, list)}, flush=True)
        result.update(bench_dedup_scale(2_000 if args.quick else 50_000, folder))
        print({k: v for k, v in result.items() if k.startswith("dedup_scale")}, flush=True)
        result.update(
            bench_decontam(60 if args.quick else 300, 40 if args.quick else 200, 300 if args.quick else 3000, folder)
        )
        print({k: v for k, v in result.items() if k.startswith("decontam_")}, flush=True)
        if not args.skip_scale:
            sizes = (2_000, 20_000) if args.quick else (100_000, 1_000_000)
            result.update(bench_scale(sizes, folder, repeats_small=3))
            print({k: v for k, v in result.items() if k.startswith(("scale_", "peak_"))}, flush=True)
    result["load_after"] = machine_load()
    result["note"] = (
        "speed: one process on a shared 2-core host (other helpers' jobs ran too; see load_*); "
        "timed section = decontaminate() only (read, match, write kept rows), index build "
        "reported apart; scale_time_ratio_1m_over_100k is the ratio of the scanning process's "
        "CPU seconds (wall-clock ratio beside it); the 100k figure is the median of 3 runs, "
        "the 1M figure one run"
    )
    if not args.quick:
        out = RESULTS / "data.json"
        if args.skip_scale and out.is_file():  # refresh the quality figures, keep the last scale run
            earlier = json.loads(out.read_text())
            kept = {k: v for k, v in earlier.items() if k.startswith(("scale_", "peak_rss"))}
            kept["scale_started"] = earlier.get("scale_started", earlier["started"])
            for key in ("load_before", "load_after"):  # the load while the scale figures were measured
                kept[f"scale_{key}"] = earlier.get(f"scale_{key}", earlier[key])
            result = {**result, **kept, "scale_from_earlier_run": True}
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
