"""Registry migrations (SQLite files only: PostgreSQL registries start at v3).

v1 stored inputs as `{path: sha}` with no role and found a checkpoint's run by walking up
to `registry.sqlite`; v2 has roles, parent runs and marker files; v3 gives input and output
rows an id (their order, on both backends) and outputs a content hash, and adds the evals,
releases and alias tables. The v1 recipes' config layouts are read here once, so nothing
else needs to know them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tempering.atomic import write_text_atomic
from tempering.runs import schema


def _v1_roles(kind: str, config: dict[str, Any]) -> dict[str, str]:
    """path -> role for a v1 run, from the config layout its recipe had then."""
    roles: dict[str, str] = {}
    if kind == "sft":
        data = config.get("data") or {}
        roles.update({p: "eval" for p in data.get("eval") or []})
        roles.update({p: "replay" for p in (data.get("replay") or {}).get("data") or []})
        roles.update({p: "train" for p in data.get("train") or []})
    elif kind == "grpo":
        held = ((config.get("heldout") or {}).get("tasks") or {}).get("source")
        if held:
            roles[held] = "heldout"
        source = (config.get("tasks") or {}).get("source")
        if source:
            roles[source] = "tasks"
    return roles


def _local(path: str, root: Path) -> Path | None:
    p = Path(path)
    for c in [p] if p.is_absolute() else [Path.cwd() / p, root.parent / p, root / p]:
        if c.exists():
            return c.resolve()
    return None


def v1_to_v2(conn: sa.Connection, registry_path: Path) -> None:
    """Fill run_inputs / run_outputs from v1 rows and mark the finished runs' final dirs."""
    root = registry_path.parent.resolve()
    runs = [dict(r._mapping) for r in conn.execute(sa.select(schema.runs).order_by(schema.runs.c.started_at))]
    by_dir: dict[Path, str] = {}  # run dir -> newest run id under that name
    for run in runs:
        by_dir[root / run["name"]] = run["id"]
    for run in runs:
        config, recorded = json.loads(run["config"]), json.loads(run["inputs"])
        roles = _v1_roles(run["kind"], config)
        rows = [
            dict(run_id=run["id"], role=roles.get(path, "train"), path=path, sha256=sha, parent_run=None)
            for path, sha in recorded.items()
        ]
        if run["base_model"]:
            local = _local(run["base_model"], root)
            parent = next((rid for d, rid in by_dir.items() if local and (local == d or d in local.parents)), None)
            rows.append(
                dict(run_id=run["id"], role="base_model", path=run["base_model"], sha256=None, parent_run=parent)
            )
        if rows:
            conn.execute(sa.insert(schema.run_inputs), rows)
        final = (json.loads(run["outputs"]) or {}).get("final")
        local_final = _local(final, root) if final and run["status"] == "finished" else None
        if local_final and local_final.is_dir():
            conn.execute(sa.insert(schema.run_outputs).values(run_id=run["id"], role="final", path=str(local_final)))
            marker = {
                "registry": str(registry_path.resolve()),
                "run_id": run["id"],
                "run": run["name"],
                "role": "final",
            }
            # the name is registry.MARKER (not imported: registry imports this module)
            write_text_atomic(local_final / "tempering-run.json", json.dumps(marker, indent=1) + "\n")


def v2_to_v3(conn: sa.Connection) -> None:
    """Rebuild run_inputs / run_outputs with an id and an output hash, keeping their row order.

    Call before `metadata.create_all`: the old tables are moved aside, the caller creates
    the v3 tables, then `copy_v2_rows` fills them.
    """
    for index in ("run_inputs_run", "run_outputs_path"):
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {index}")
    for table in ("run_inputs", "run_outputs"):
        conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {table}_v2")


def copy_v2_rows(conn: sa.Connection) -> None:
    """Copy the moved-aside v2 rows into the v3 tables (in their old order) and drop the old tables."""
    conn.exec_driver_sql(
        "INSERT INTO run_inputs (run_id, role, path, sha256, parent_run) "
        "SELECT run_id, role, path, sha256, parent_run FROM run_inputs_v2 ORDER BY rowid"
    )
    conn.exec_driver_sql(
        "INSERT INTO run_outputs (run_id, role, path) SELECT run_id, role, path FROM run_outputs_v2 ORDER BY rowid"
    )
    conn.exec_driver_sql("DROP TABLE run_inputs_v2")
    conn.exec_driver_sql("DROP TABLE run_outputs_v2")
