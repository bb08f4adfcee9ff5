"""A real PostgreSQL server for the tests: Debian's `postgresql` package, run from a temporary data
directory by an unprivileged user (PostgreSQL refuses to run as root), on a free loopback port.

It asks for a password (SCRAM) over TCP like a team's server would; the tests give it through
`PGPASSWORD`, as a user would, so no URL a test writes carries it.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

USER = "builder"
RUN_AS = "postgres"  # the unprivileged account Debian's package creates, used when the tests run as root


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries or no driver here."""


def _bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    initdb = found[-1] if found else shutil.which("initdb")
    if not initdb:
        raise PostgresUnavailable("no PostgreSQL server binaries (Debian: apt-get install -y postgresql)")
    return Path(initdb).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """Start with `PostgresServer.start()`; `database()` makes a fresh database and returns its URL."""

    def __init__(self, bindir: Path, root: Path, password: str) -> None:
        self.bindir, self.root, self.password = bindir, root, password
        self.data = root / "data"
        self.port = 0
        self._as_root = os.geteuid() == 0

    @classmethod
    def start(cls) -> PostgresServer:
        try:
            import psycopg  # noqa: F401 - the driver a PostgreSQL workspace needs
        except ImportError as exc:
            raise PostgresUnavailable("psycopg is not installed (pip install 'xbench-builder[postgresql]')") from exc
        server = cls(_bindir(), Path(tempfile.mkdtemp(prefix="builder-pg-")), secrets.token_hex(16))
        try:
            server._initdb()
            server._start()
        except BaseException:
            server.stop()
            raise
        return server

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", RUN_AS, "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
            raise RuntimeError(f"{' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}\n{tail}")

    def _initdb(self) -> None:
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self._as_root:
            account = pwd.getpwnam(RUN_AS)
            for path in (self.root, pwfile):
                os.chown(path, account.pw_uid, account.pw_gid)
        try:
            self._run("initdb", "-D", str(self.data), "-U", USER, "--pwfile", str(pwfile), "--auth", "scram-sha-256",
                      "-E", "UTF8", "--no-locale", "--no-sync")
        finally:
            pwfile.unlink()

    def _start(self) -> None:
        for attempt in range(3):  # another process may take the free port before the server binds it
            self.port = _free_port()
            try:
                self._pg_ctl_start()
                return
            except RuntimeError:
                if attempt == 2:
                    raise

    def _pg_ctl_start(self) -> None:
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -c unix_socket_directories={self.root} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w", "-t", "60", "-o", options)

    def restart(self, while_stopped: Callable[[Path], None]) -> None:
        """Stop the server (its buffers gone), call `while_stopped(data_directory)`, start it again on its port."""
        self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")
        while_stopped(self.data)
        self._pg_ctl_start()

    def stop(self) -> None:
        if (self.data / "postmaster.pid").is_file():
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", "fast", "-w")
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=self.port, user=USER, password=self.password, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(sql)

    def database(self, template: str | None = None) -> str:
        """A new, empty database (or a copy of `template`'s), as a URL without the password."""
        name = "ws_" + uuid.uuid4().hex[:12]
        self._admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        return self.url(name)

    def drop(self, url: str) -> None:
        self._admin(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
