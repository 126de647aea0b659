"""The registry's tables (SQLAlchemy Core), one definition for SQLite and PostgreSQL.

JSON documents (configs, metrics, gate verdicts) are stored as text so that both backends
read and write them the same way, and so that SQLite files written by schema v1/v2 keep
their columns. Content hashes are hex sha256 strings.
"""

from __future__ import annotations

import sqlalchemy as sa

SCHEMA_VERSION = 3
metadata = sa.MetaData()

schema_version = sa.Table("schema_version", metadata, sa.Column("version", sa.Integer, nullable=False))

# One row per run of a stage (sft, grpo, dedup, decontam, mix, eval, export, ...).
runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("status", sa.Text, nullable=False),  # running | finished | failed | resumed (a later attempt resumed it)
    sa.Column("base_model", sa.Text),
    sa.Column("config", sa.Text, nullable=False),  # JSON
    sa.Column("inputs", sa.Text, nullable=False),  # JSON {path: sha256}, a summary of run_inputs
    sa.Column("outputs", sa.Text, nullable=False, server_default="{}"),
    sa.Column("metrics", sa.Text, nullable=False, server_default="{}"),
    sa.Column("error", sa.Text),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("finished_at", sa.Float),
)

# The datasets (and models) a run read, each with the role it played.
run_inputs = sa.Table(
    "run_inputs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("role", sa.Text, nullable=False),  # one of registry.ROLES
    sa.Column("path", sa.Text, nullable=False),  # as given (relative to where the run started)
    sa.Column("sha256", sa.Text),  # files and data dirs
    sa.Column("parent_run", sa.String(32)),  # the run whose output dir this is (its marker)
    sa.Index("run_inputs_run", "run_id"),
    sa.Index("run_inputs_sha", "sha256"),
)

# What a run wrote: datasets (a dedup's kept rows, a mix), checkpoints (`final`, `merged`), run dirs.
run_outputs = sa.Table(
    "run_outputs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(32), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("role", sa.Text, nullable=False),  # final | merged | kept | removed | mix | run_dir ...
    sa.Column("path", sa.Text, nullable=False),  # absolute
    sa.Column("sha256", sa.Text),  # files and checkpoints; None for run dirs
    sa.Index("run_outputs_path", "path"),
    sa.Index("run_outputs_sha", "sha256"),
)

# An evaluation of a model: its report file and, when a gate judged it, the verdict.
evals = sa.Table(
    "evals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.String(32)),  # the run that wrote the model, if known
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("model_sha256", sa.Text),
    sa.Column("report", sa.Text, nullable=False),  # the eval results/report file
    sa.Column("report_sha256", sa.Text, nullable=False),
    sa.Column("metrics", sa.Text, nullable=False, server_default="{}"),  # JSON summary
    sa.Column("gate", sa.Text),  # JSON: evals.gate's GateResult.to_dict()
    sa.Column("passed", sa.Boolean),  # the gate's verdict, None without a gate
    sa.Column("created_at", sa.Float, nullable=False),
)

# A release: one version of a model that passed its gate.
releases = sa.Table(
    "releases",
    metadata,
    sa.Column("version", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("model", sa.Text, nullable=False),
    sa.Column("model_sha256", sa.Text),
    sa.Column("run_id", sa.String(32)),
    sa.Column("eval_id", sa.Integer),
    sa.Column("gate", sa.Text, nullable=False),  # JSON verdict that allowed it
    sa.Column("canary_gate", sa.Text),  # JSON verdict of the canary decision, if any
    sa.Column("status", sa.Text, nullable=False),  # candidate | production | rolled_back | retired
    sa.Column("created_at", sa.Float, nullable=False),
)

# Every move of an alias (production, candidate): the current target is the newest row.
alias_events = sa.Table(
    "alias_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("alias", sa.Text, nullable=False),
    sa.Column("release", sa.Integer),  # None: the alias was cleared
    sa.Column("previous", sa.Integer),  # what the alias pointed at before
    sa.Column("action", sa.Text, nullable=False),  # promote | rollback | canary-pass | canary-fail | clear
    sa.Column("reason", sa.Text),
    sa.Column("at", sa.Float, nullable=False),
    sa.Index("alias_events_alias", "alias", "id"),
)
