"""A deployment database written before votes and battles were tied to keys opens, keeps
its battles private and counts each key's first vote on a battle only."""

from __future__ import annotations

import sqlite3

from tempering.serve.store import SCHEMA, Store


def test_an_older_database_counts_one_vote_per_key_and_keeps_battles_private(tmp_path):
    path = tmp_path / "serve.sqlite"
    old = sqlite3.connect(path, isolation_level=None)
    old.executescript(SCHEMA)  # the tables as the landed server made them (no `shared` column)
    old.execute("INSERT INTO battles VALUES ('b1', 'key-a', 'a private prompt', 'v1', 'v2', 'A', 'B', 1.0)")
    for i in range(20):  # one key, twenty invented annotators
        old.execute(
            "INSERT INTO votes (battle_id, key_id, annotator, choice, created_at) VALUES ('b1', 'key-a', ?, 'a', ?)",
            (f"sock{i}", 2.0 + i),
        )
    old.execute(
        "INSERT INTO votes (battle_id, key_id, annotator, choice, created_at) VALUES ('b1', 'key-b', 'bob', 'b', 30)"
    )
    old.close()

    store = Store(path)
    assert [(v["annotator"], v["choice"]) for v in store.votes()] == [("sock0", "a"), ("bob", "b")]
    assert store.battle("b1", "key-a")["prompt"] == "a private prompt"
    assert store.battle("b1", "key-c") is None and store.open_battle("key-c", 3) is None
