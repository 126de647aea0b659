"""Slot poisoning: a program that leaves a 1,200-deep directory tree in its
/work used to make the host's recursive cleanup raise RecursionError out of `pool.exec`, on
that run and every later use of the slot; four such runs broke a 4-slot pool for good and
the canonical HumanEval/0 then scored as a verifier error forever. Now the slot's tmpfs is
replaced, the attacker's run returns its own result, and every slot keeps working."""

from tempering.sandbox.scratch import CLEAN_MAX_DEPTH

DEEP = "import os\nfor _ in range({depth}):\n    os.mkdir('d')\n    os.chdir('d')\nprint('built')\n"
DEPTH = 1200


def test_deep_trees_do_not_poison_any_slot(pool):
    slots = pool.health()["slots"]
    rebuilds = pool.health()["slot_rebuilds"]
    for _ in range(slots):  # one run is FIFO over the slots: each one gets a tree
        r = pool.exec(code=DEEP.format(depth=DEPTH))
        assert r.status == "ok" and r.stdout == "built\n", r.stderr  # the run's own result, no exception
    health = pool.health()
    assert health["broken_slots"] == {} and health["slot_rebuilds"] == rebuilds + slots
    for _ in range(slots):
        r = pool.exec(code="import os\nprint(sorted(os.listdir('.')))\n")
        assert r.status == "ok" and r.stdout == "['main.py']\n"


def test_tree_just_within_the_walk_is_cleaned_without_remount(pool):
    rebuilds = pool.health()["slot_rebuilds"]
    r = pool.exec(code=DEEP.format(depth=CLEAN_MAX_DEPTH - 1) + "open('f', 'w').write('x')\n")
    assert r.status == "ok"
    assert pool.health()["slot_rebuilds"] == rebuilds


def test_deep_tree_in_a_session_lists_without_recursion(pool):
    with pool.session() as s:
        r = s.exec(code=DEEP.format(depth=DEPTH) + "open('leaf.txt', 'w').write('x')\n")
        assert r.status == "ok"
        s.write_file("top.txt", "y")
        assert s.list_files() == ["main.py", "top.txt"]  # past the depth cap nothing is entered, nothing raises
        assert s.read_file("top.txt") == b"y"


def test_humaneval_0_scores_one_after_deep_tree_completions():
    """Through the `code` verifier: attacking completions are the candidate's failures, and the
    canonical solution still scores 1 afterwards."""
    from tempering.sources.humaneval import humaneval_canonical, humaneval_tasks
    from tempering.verifiers import score

    task = next(t for t in humaneval_tasks() if t.id == "HumanEval/0")
    # `os` is flagged by the static checks; tarfile (not flagged) builds the tree just as well
    attack = (
        "    import tarfile\n    try:\n        t = tarfile.open('t.tar', 'x')\n    except FileExistsError:\n"
        "        return False\n    with t:\n        for i in range(1, 1201):\n"
        "            info = tarfile.TarInfo('/'.join(['d'] * i))\n"
        "            info.type, info.mode = tarfile.DIRTYPE, 0o755\n            t.addfile(info)\n"
        "    with tarfile.open('t.tar') as t:\n        t.extractall('.')\n    return False\n"
    )
    for _ in range(4):
        reward = score(task, attack)  # before the fix: RecursionError out of the sandbox
        assert reward.value < 1.0 and "asserts passed" in reward.detail  # scored as the candidate's answer
    assert score(task, humaneval_canonical("HumanEval/0")).value == 1.0
