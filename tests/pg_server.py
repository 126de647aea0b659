"""A throwaway PostgreSQL server for the registry tests.

`TEMPERING_TEST_PG_URL` (set by `.ci/run`) names a running server to use. Without it a
cluster is made with `initdb` and started with `pg_ctl` on 127.0.0.1 (a free port), and
stopped and deleted afterwards. PostgreSQL refuses to run as root, so as root the cluster
belongs to the `postgres` user (Debian's package creates it; `nobody` otherwise) and its
binaries run under `runuser`. Each test gets its own database (`fresh_database`).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import sqlalchemy as sa

ENV = "TEMPERING_TEST_PG_URL"


def _bindir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name))
    return Path(dirs[-1]) if dirs and Path(dirs[-1], "initdb").is_file() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalPostgres:
    """initdb + pg_ctl start on a free port; `stop()` stops it and removes its files."""

    def __init__(self) -> None:
        bindir = _bindir()
        if bindir is None:
            raise FileNotFoundError(f"no PostgreSQL binaries (initdb, pg_ctl); install postgresql or set {ENV}")
        self.bindir = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="tempering-pg-"))
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = "postgres"
            try:
                pwd.getpwnam(user)
            except KeyError:
                user = "nobody"
            shutil.chown(self.dir, user)
            self.prefix = ["runuser", "-u", user, "--"]
        self.data = self.dir / "data"
        self.port = _free_port()
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-w",
            "start",
            "-o",
            f"-h 127.0.0.1 -p {self.port} -k {self.dir} -F",
        )
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        res = subprocess.run([*self.prefix, str(self.bindir / tool), *args], capture_output=True, text=True)
        if res.returncode != 0:
            log = self.dir / "log"
            tail = log.read_text()[-2000:] if log.is_file() else ""
            raise RuntimeError(f"{tool} failed ({res.returncode}): {res.stderr.strip()}\n{tail}")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def fresh_database(server_url: str) -> tuple[str, callable]:
    """Create an empty database on the server; returns its URL and a function that drops it."""
    name = f"tempering_test_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    url = sa.make_url(server_url).set(database=name).render_as_string(hide_password=False)

    def drop() -> None:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.dispose()

    return url, drop
