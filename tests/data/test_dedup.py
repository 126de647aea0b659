"""Dedup: exact copies after normalisation, near duplicates at a hand-computed Jaccard, keep-first
clusters, determinism, and the LSH band choice."""

import random

import numpy as np
import pytest

from tempering.data.dedup import Deduper, dedup_rows, jaccard, lsh_bands, shingle_set
from tempering.data.textnorm import normalize
from tests.conftest import load_script

WORDS = [f"w{i}" for i in range(3000)]


def doc(seed: int, n: int = 60) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)]


def test_jaccard_of_shingles_is_hand_countable():
    a = "a b c d e f g".split()
    b = "a b c d e f x".split()
    # 3-word shingles: a has abc bcd cde def efg; b has abc bcd cde def efx -> 4 shared of 6
    assert jaccard(shingle_set(a, 3), shingle_set(b, 3)) == pytest.approx(4 / 6)
    assert len(shingle_set("a b".split(), 5)) == 1  # shorter than a shingle: one shingle of all words


def test_lsh_bands_put_a_pair_at_the_threshold_in_a_bucket_almost_surely():
    assert lsh_bands(0.8, 128) == (25, 5)
    # 5 rows: 1 - (1 - 0.8^5)^25 = 0.99995 >= 0.999; 6 rows: 1 - (1 - 0.8^6)^21 = 0.9983 < 0.999
    assert 1 - (1 - 0.8**5) ** 25 >= 0.999 > 1 - (1 - 0.8**6) ** 21


def test_exact_duplicates_ignore_case_spacing_and_punctuation():
    d = Deduper()
    assert d.add(normalize("Hello, World! How are you today?")).kind == "kept"
    again = d.add(normalize("hello world\n  how ARE you -- today"))
    assert (again.kind, again.of, again.jaccard) == ("exact", 0, 1.0)


def test_near_duplicate_found_at_its_exact_jaccard_and_hard_negative_kept():
    base = doc(1, 100)
    near = list(base)
    near[50] = "zzz"  # one substitution breaks the 5 shingles covering position 50: 91 shared of 101
    far = list(base)
    for i in (10, 30, 50, 70, 90):  # five substitutions: 71 shared of 96 + 25 = 0.587
        far[i] = f"yyy{i}"
    d = Deduper(threshold=0.8)
    assert d.add(base).kind == "kept"
    found = d.add(near)
    assert (found.kind, found.of) == ("near", 0) and found.jaccard == pytest.approx(91 / 101)
    assert jaccard(shingle_set(far, 5), shingle_set(base, 5)) == pytest.approx(71 / 121)
    assert d.add(far).kind == "kept"


def test_keep_first_clusters_and_exact_copy_of_a_dropped_row_joins_the_keeper():
    base, other = doc(1, 100), doc(2, 100)
    near = list(base)
    near[40] = "zzz"
    rows = [
        ("a", {"text": " ".join(base)}),
        ("b", {"text": " ".join(other)}),
        ("c", {"text": " ".join(near)}),
        ("d", {"text": " ".join(near).upper()}),
        ("e", {"text": " ".join(other)}),
    ]
    kept = []
    report = dedup_rows(rows, Deduper(threshold=0.8), kept.append)
    assert [r["text"] for r in kept] == [" ".join(base), " ".join(other)]
    assert report.summary() == {"rows": 5, "kept": 2, "exact_duplicates": 2, "near_duplicates": 1, "clusters": 2}
    clusters = report.cluster_list()
    assert [(c["keeper"], c["size"]) for c in clusters] == [("a", 3), ("b", 2)]
    assert [(m["row"], m["kind"]) for m in clusters[0]["members"]] == [("c", "near"), ("d", "exact")]
    assert report.dropped_ids == ["c", "d", "e"]


def test_same_seed_same_output_and_exact_check_makes_the_seed_irrelevant_here():
    rng = random.Random(0)
    docs = [doc(i % 40, 80) for i in range(40)]
    for i in range(40):  # near copies of the first 40 with 1-3 substitutions
        copy = list(docs[i])
        for _ in range(rng.randint(1, 3)):
            copy[rng.randrange(80)] = "edit"
        docs.append(copy)

    def run(seed):
        d = Deduper(seed=seed)
        return [(x.kind, x.of) for x in (d.add(t) for t in docs)]

    assert run(1) == run(1)
    assert run(1) == run(7)  # P(miss) at J >= 0.8 is < 0.001 per pair; exact Jaccard decides the rest


def test_exact_only_mode_and_bad_settings():
    d = Deduper(near=False)
    base = doc(3, 50)
    near = list(base)
    near[0] = "zzz"
    assert [d.add(base).kind, d.add(near).kind, d.add(base).kind] == ["kept", "kept", "exact"]
    with pytest.raises(ValueError, match="threshold must be in"):
        Deduper(threshold=1.5)
    with pytest.raises(ValueError, match="shingle must be >= 1"):
        Deduper(shingle=0)


def test_shingle_hashes_are_stable_across_processes():
    import subprocess
    import sys

    code = (
        "from tempering.data.dedup import shingle_set; "
        "print(shingle_set('the cat sat on the mat today'.split(), 3).tolist())"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(s), "PYTHONPATH": ":".join(sys.path)},
        ).stdout
        for s in (1, 2)
    }
    assert len(outs) == 1
    assert eval(outs.pop()) == shingle_set("the cat sat on the mat today".split(), 3).tolist()
    assert shingle_set(["a"], 3).dtype == np.uint64


def load_bench():
    """bench/throughput/data.py, whose labelled sets give docs/data.md's measured precision and recall (run here small)."""
    return load_script("bench/throughput/data.py", "bench_data")


def test_labelled_near_duplicates_precision_and_recall_at_least_095():
    result = load_bench().bench_near_dups(300)
    assert result["near_dup_planted_jaccard_min"] >= 0.8 > result["near_dup_hard_negative_jaccard_max"]
    assert result["near_dup_planted"] >= 100 and result["near_dup_hard_negatives"] >= 100
    assert result["near_dup_precision"] >= 0.95 and result["near_dup_recall"] >= 0.95
    assert result["near_dup_right_keeper"] >= 0.95


def test_a_row_of_punctuation_only_is_compared_exactly():
    d = Deduper()
    assert [d.add(normalize("?!")).kind, d.add(normalize("...")).kind, d.add(normalize("a b")).kind] == [
        "kept",
        "exact",
        "kept",
    ]
