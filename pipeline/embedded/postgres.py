"""A PostgreSQL cluster of the system's own server binaries, started on demand.

Used by the tests, ``volunteer up`` and ``volunteer demo`` on machines without Docker: ``initdb``
into a directory, the server listening on 127.0.0.1 only, with its log and Unix socket inside that
directory. PostgreSQL refuses to run as root, so as root the server commands run as the
``postgres`` OS user (``runuser``) and the directory is handed to that user.

Who may log in (``pg_hba.conf``, rewritten at every start so an older cluster is brought in line):

- over TCP, only with the cluster's password (``scram-sha-256``): a random one, kept in the 0600
  file ``<dir>/password`` and carried in :attr:`EmbeddedPostgres.url`. Any local user can reach
  127.0.0.1, so a password-less TCP login would make every one of them a superuser (``COPY … TO
  PROGRAM`` runs shell commands as the server's OS user);
- over the Unix socket, without a password (``trust``): the socket lives in the cluster's own
  0700 directory, which only its owner (and root) can enter.

With ``listen`` (``volunteer up --listen ADDR``) the server also listens on ADDR for other hosts,
with the same rule: a TCP login from any address needs the password (SCRAM), so another host never
gets in without it.

Without a ``data_dir`` the cluster is throwaway (a temp dir, durability switched off for speed,
removed by :meth:`EmbeddedPostgres.close`); with one, data survives restarts and is never deleted.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

PREFERRED_MAJOR = 15
SERVER_USER = "postgres"
DATABASE = "postgres"
SYSTEM_ROOT = Path("/usr/lib/postgresql")
"""Where Debian installs each major version's server programs (``<major>/bin``)."""
THROWAWAY_OPTIONS = ("-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
PASSWORD_FILE = "password"
HBA_RULES = (
    "# written by volunteer-stream at every start (pipeline/embedded/postgres.py)\n"
    "local all all trust\n"
    "host all all 127.0.0.1/32 scram-sha-256\n"
    "host all all ::1/128 scram-sha-256\n"
)
LISTEN_HBA_RULES = (
    "host all all 0.0.0.0/0 scram-sha-256\n"
    "host all all ::/0 scram-sha-256\n"
)


class PostgresNotFound(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


class EmbeddedPostgresError(RuntimeError):
    """The embedded cluster could not be initialised, started or stopped."""


def find_bin_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The folder holding ``initdb``/``pg_ctl``: explicit, ``VOLUNTEER_PG_BIN``, Debian's, then PATH.

    Debian keeps server programs in ``/usr/lib/postgresql/<major>/bin``, off PATH; version 15 is
    preferred (the version the project is tested on), then the newest installed.
    """
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    env = os.environ.get("VOLUNTEER_PG_BIN")
    if env:
        candidates.append(Path(env))
    debian = sorted(
        SYSTEM_ROOT.glob("*/bin"),
        key=lambda p: (p.parent.name != str(PREFERRED_MAJOR), -_major(p.parent.name)),
    )
    candidates.extend(debian)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise PostgresNotFound(
        "no PostgreSQL server binaries found (initdb, pg_ctl): install postgresql-15 "
        "(apt-get install postgresql-15) or point VOLUNTEER_DATABASE_URL at an existing server"
    )


def _major(name: str) -> int:
    try:
        return int(name.split(".")[0])
    except ValueError:
        return 0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class EmbeddedPostgres:
    """One local PostgreSQL cluster: ``start()``, ``stop()``, ``restart()``, ``url``.

    ``with EmbeddedPostgres() as pg: ...`` starts a throwaway cluster and removes it afterwards.
    ``stop()`` keeps the data so ``start()`` brings the same cluster back on the same port (the
    outage tests rely on that); ``close()`` stops and, for a throwaway cluster, deletes it.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        bin_dir: str | os.PathLike[str] | None = None,
        durable: bool | None = None,
        start_timeout: float = 60.0,
        listen: str | None = None,
    ) -> None:
        self.listen = listen
        self._bin = find_bin_dir(bin_dir)
        self._given_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._root: Path | None = self._given_dir
        self._port = port
        self.durable = durable if durable is not None else data_dir is not None
        self.start_timeout = start_timeout
        self._as_root = os.geteuid() == 0
        self._running = False

    # ------------------------------------------------------------------ paths and identity

    @property
    def root(self) -> Path:
        """The cluster's folder: ``data/`` (PGDATA), ``server.log`` and the Unix socket."""
        if self._root is None:
            raise EmbeddedPostgresError("the cluster has no directory yet; call start() first")
        return self._root

    @property
    def pgdata(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    @property
    def port(self) -> int:
        if self._port is None:
            raise EmbeddedPostgresError("the cluster has no port yet; call start() first")
        return self._port

    @property
    def password_path(self) -> Path:
        """The 0600 file holding the ``postgres`` role's password (created at the first start)."""
        return self.root / PASSWORD_FILE

    @property
    def password(self) -> str:
        try:
            return self.password_path.read_text().strip()
        except OSError:
            raise EmbeddedPostgresError("the cluster has no password yet; call start() first") from None

    @property
    def url(self) -> str:
        """libpq URL of the ``postgres`` database as the ``postgres`` superuser, password included."""
        return self.url_for(DATABASE)

    def url_for(self, database: str) -> str:
        return f"postgresql://{SERVER_USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    @property
    def remote_url(self) -> str:
        """The URL other hosts use: on the listen address (password included); :attr:`url` without one."""
        if self.listen is None:
            return self.url
        host = f"[{self.listen}]" if ":" in self.listen else self.listen
        return f"postgresql://{SERVER_USER}:{self.password}@{host}:{self.port}/{DATABASE}"

    @property
    def socket_conninfo(self) -> str:
        """Password-less conninfo over the Unix socket (for this directory's owner only)."""
        return f"host={self.root} port={self.port} user={SERVER_USER} dbname={DATABASE}"

    @property
    def running(self) -> bool:
        """Started by us and its postmaster process still alive (a killed server reads as stopped)."""
        if not self._running or self._root is None:
            return False
        pid = self.server_pid()
        return pid is not None and _alive(pid)

    def server_pid(self) -> int | None:
        """The postmaster's process id, from ``postmaster.pid`` (None when not running)."""
        try:
            first = (self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0].strip()
            return int(first)
        except (OSError, ValueError):
            return None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> EmbeddedPostgres:
        """Initialise the cluster if needed and start the server; returns once it accepts connections.

        After a crash (server killed) this restarts it: PostgreSQL recovers from its WAL.
        """
        if self.running:
            return self
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="volunteer-pg-"))
        self._prepare_dir()
        fresh_password = self._ensure_password_file()
        if not (self.pgdata / "PG_VERSION").is_file():
            self._initdb()
            fresh_password = False  # initdb set it
        self._write_hba()
        self._wait_for_dead_server()
        fixed_port = self._port is not None
        attempts = 1 if fixed_port else 3
        last_error: EmbeddedPostgresError | None = None
        for _ in range(attempts):
            if self._port is None or (not fixed_port and _port_open(self._port)):
                self._port = free_port()
            try:
                self._pg_ctl_start()
                self._running = True
                if fresh_password:  # a cluster from before passwords: give its superuser ours
                    self._set_password()
                return self
            except EmbeddedPostgresError as exc:
                last_error = exc
                if not fixed_port:
                    self._port = None
        assert last_error is not None
        raise last_error

    def stop(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data (``mode``: smart, fast or immediate, as pg_ctl)."""
        if self._root is None or not self.running:  # never started, stopped, or already dead
            self._running = False
            return
        result = self._run(
            [str(self._bin / "pg_ctl"), "-D", str(self.pgdata), "-m", mode, "-w", "-t", "60", "stop"],
            check=False,
        )
        self._running = False
        if result.returncode != 0 and (self.pgdata / "postmaster.pid").exists():
            raise EmbeddedPostgresError(f"pg_ctl stop failed: {_tail(result.stderr or result.stdout)}")

    def restart(self, keep_data: bool = True) -> EmbeddedPostgres:
        """Stop and start again on the same port; ``keep_data=False`` starts from an empty cluster."""
        self.stop()
        if not keep_data and self._root is not None:
            shutil.rmtree(self.pgdata, ignore_errors=True)
        return self.start()

    def close(self) -> None:
        """Stop the server; a throwaway cluster's directory is removed, a given one is kept."""
        try:
            self.stop()
        finally:
            if self._given_dir is None and self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"EmbeddedPostgres({self._root}, port={self._port}, {state})"

    # ------------------------------------------------------------------ internals

    def _server_user(self) -> pwd.struct_passwd | None:
        if not self._as_root:
            return None
        try:
            return pwd.getpwnam(SERVER_USER)
        except KeyError:
            raise EmbeddedPostgresError(
                f"running as root needs the '{SERVER_USER}' OS user to run the server "
                "(the postgresql-15 package creates it); or run as an ordinary user"
            ) from None

    def _prepare_dir(self) -> None:
        root = self.root
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o700)
        user = self._server_user()
        if user is not None:
            for path in [root, *root.rglob("*")]:
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_uid != user.pw_uid:
                        os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
            probe = self._run(["test", "-w", str(root)], check=False)
            if probe.returncode != 0:
                raise EmbeddedPostgresError(
                    f"the '{SERVER_USER}' OS user cannot reach {root}: choose a data dir whose parent "
                    "folders are traversable by it (e.g. under /tmp or /var/lib)"
                )

    def _wait_for_dead_server(self, timeout: float = 30.0) -> None:
        """After a crash, wait until the old postmaster has left the process table.

        PostgreSQL refuses to start while the PID in a stale ``postmaster.pid`` still exists, and
        a killed server lingers as a zombie until its parent (often PID 1 in a container) reaps it.
        """
        pid = self.server_pid()
        if pid is None or _alive(pid):
            return  # nothing stale; a live server elsewhere makes pg_ctl fail with its own message
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            except PermissionError:
                return  # another user's process reuses the PID: PostgreSQL will sort it out
            time.sleep(0.05)

    def _initdb(self) -> None:
        shutil.rmtree(self.pgdata, ignore_errors=True)
        cmd = [
            str(self._bin / "initdb"), "-D", str(self.pgdata), "-U", SERVER_USER,
            "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={self.password_path}",
            "-E", "UTF8", "--no-locale",
        ]
        if not self.durable:
            cmd.append("--no-sync")
        result = self._run(cmd, check=False)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed: {_tail(result.stderr or result.stdout)}")

    def _ensure_password_file(self) -> bool:
        """Create ``<dir>/password`` (0600, random) unless it exists; True when it was just created."""
        path = self.password_path
        if path.is_file() and path.read_text().strip():
            os.chmod(path, 0o600)
            return False
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # 0600 whatever the umask
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, (secrets.token_urlsafe(24) + "\n").encode("ascii"))
        finally:
            os.close(fd)
        user = self._server_user()
        if user is not None:
            os.chown(path, user.pw_uid, user.pw_gid)
        return True

    def _write_hba(self) -> None:
        """Password over TCP, trust only on the socket in our 0700 directory (module docstring)."""
        hba = self.pgdata / "pg_hba.conf"
        hba.write_text(HBA_RULES + (LISTEN_HBA_RULES if self.listen is not None else ""))
        os.chmod(hba, 0o600)
        user = self._server_user()
        if user is not None:
            os.chown(hba, user.pw_uid, user.pw_gid)

    def _set_password(self) -> None:
        import psycopg
        from psycopg import sql

        try:
            with psycopg.connect(self.socket_conninfo, autocommit=True, connect_timeout=10) as conn:
                conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                    sql.Identifier(SERVER_USER), sql.Literal(self.password)))
        except psycopg.Error as exc:
            raise EmbeddedPostgresError(f"cannot set the cluster's password: {exc}") from None

    def _pg_ctl_start(self) -> None:
        options = [
            f"-p {self.port}",
            f"-k {self.root}",
            "-c listen_addresses=" + ("127.0.0.1" if self.listen is None else f"127.0.0.1,{self.listen}"),
        ]
        if not self.durable:
            options.extend(THROWAWAY_OPTIONS)
        cmd = [
            str(self._bin / "pg_ctl"), "-D", str(self.pgdata), "-l", str(self.log_path),
            "-w", "-t", str(int(self.start_timeout)), "-o", " ".join(options), "start",
        ]
        started = time.monotonic()
        result = self._run(cmd, check=False)
        if result.returncode != 0:
            log_tail = ""
            with contextlib.suppress(OSError):
                log_tail = _tail(self.log_path.read_text(errors="replace"))
            raise EmbeddedPostgresError(
                f"PostgreSQL did not start on 127.0.0.1:{self.port} "
                f"(after {time.monotonic() - started:.1f}s): {log_tail or _tail(result.stderr)}"
            )

    def _run(self, cmd: list[str], *, check: bool) -> subprocess.CompletedProcess[str]:
        if self._server_user() is not None:
            cmd = ["runuser", "-u", SERVER_USER, "--", *cmd]
        return subprocess.run(
            cmd, check=check, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd="/",
        )


def _alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (in containers nobody may reap the server)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _tail(text: str | None, lines: int = 5) -> str:
    if not text:
        return ""
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
