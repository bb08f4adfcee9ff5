"""Label Studio as a real server: installed into its own environment, run on loopback, stopped.

The project depends only on `label-studio-sdk`; the server (a Django application with many pinned
dependencies) lives in a virtual environment of its own, installed from `requirements/label-studio.lock`
into a folder named for its version (`builder.environments`). Its data directory is inside the
workspace, and its API token is generated (or taken from the environment) and kept in a 0600 file.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from builder.environments import ToolEnvironment

LABEL_STUDIO = ToolEnvironment("label-studio")
ADMIN_USER = "admin@builder.local"


class ServerError(RuntimeError):
    pass


@dataclass(frozen=True)
class Connection:
    url: str
    token: str

    def __repr__(self) -> str:  # never show the token
        return f"Connection(url={self.url!r}, token=<hidden>)"


def venv_dir() -> Path:
    """`BUILDER_LABEL_STUDIO_VENV` if set (an environment of your own), else the locked version's."""
    own = os.environ.get("BUILDER_LABEL_STUDIO_VENV")
    return Path(own) if own else LABEL_STUDIO.directory()


def executable() -> Path:
    return venv_dir() / "bin" / "label-studio"


def ensure_installed(log=print) -> Path:
    """Label Studio's executable, installed from its lock first if need be (an environment of your own is used as it is)."""
    if not (os.environ.get("BUILDER_LABEL_STUDIO_VENV") and executable().is_file()):
        LABEL_STUDIO.ensure(venv_dir(), log=log)
    if not executable().is_file():
        raise ServerError(f"Label Studio did not install into {venv_dir()}")
    return executable()


def installed_version() -> str:
    """The Label Studio version the environment holds (from its metadata: an environment of your own may differ from the lock)."""
    site = [str(p) for p in (venv_dir() / "lib").glob("python*/site-packages")]
    found = next(iter(metadata.distributions(name="label-studio", path=site)), None)
    if found is None:
        raise ServerError(f"no Label Studio in {venv_dir()}")
    return found.version


def migrated_template(log=print) -> Path:
    """A data directory whose database is already migrated, made once per installed Label Studio version.

    A fresh workspace copies it and starts in seconds instead of migrating for half a minute. It holds
    no user and no organization: those are created at the copy's first start from our own secrets.
    Its name carries the version that migrated it, so an environment upgraded in place never hands
    out a template migrated by another version.
    """
    ensure_installed(log=log)
    template = venv_dir() / f"migrated-data-{installed_version()}"
    if (template / "label_studio.sqlite3").is_file():
        return template
    log("preparing Label Studio's database (about 30 s, once per install)")
    building = Path(tempfile.mkdtemp(prefix="migrating-", dir=venv_dir()))
    env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": str(building), "COLLECT_ANALYTICS": "false",
           "LATEST_VERSION_CHECK": "false", "SENTRY_DSN": "", "FRONTEND_SENTRY_DSN": ""}
    for var in ("LABEL_STUDIO_USERNAME", "LABEL_STUDIO_PASSWORD", "LABEL_STUDIO_USER_TOKEN", "LABEL_STUDIO_API_KEY"):
        env.pop(var, None)
    manage = next((venv_dir() / "lib").glob("python*/site-packages/label_studio/manage.py"))
    try:
        subprocess.run([str(venv_dir() / "bin" / "python"), str(manage), "migrate"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        building.rename(template)
    except subprocess.CalledProcessError as exc:
        raise ServerError(f"migrating Label Studio's database failed (exit {exc.returncode})") from exc
    except OSError:  # another process made the template first
        pass
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return template


def state_dir(workspace: Path) -> Path:
    return workspace / "label-studio"


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value)
    os.chmod(path, 0o600)


def _secret(path: Path, env: str | None) -> str:
    if env and os.environ.get(env):
        value = os.environ[env]
        _write_secret(path, value)
        return value
    if path.is_file():
        return path.read_text().strip()
    value = secrets.token_hex(20)
    _write_secret(path, value)
    return value


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _healthy(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health/", timeout=timeout) as resp:
            return json.loads(resp.read()).get("status") == "UP"
    except Exception:  # noqa: BLE001 - any failure means "not yet"
        return False


def check_bind(host: str, allow_remote: bool) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_remote:
        raise ServerError(f"refusing to bind Label Studio to {host}: not a loopback address (pass --allow-remote to do so)")


def serve(
    workspace: Path,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    allow_remote: bool = False,
    timeout_s: float = 120.0,
    log=print,
) -> Connection:
    """Start Label Studio for this workspace (or return the one already running) and wait until healthy."""
    check_bind(host, allow_remote)
    running = _running(workspace)
    if running:
        return running
    exe = ensure_installed(log=log)
    sdir = state_dir(workspace)
    data = sdir / "data"
    if not (data / "label_studio.sqlite3").exists():
        shutil.copytree(migrated_template(log=log), data, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".env"))
        _write_secret(data / ".env", f"SECRET_KEY={secrets.token_urlsafe(50)}\n")  # never shared between workspaces
    token = _secret(sdir / "token", "LABEL_STUDIO_API_KEY")
    password = _secret(sdir / "password", None)
    port = port or _free_port(host)
    env = {
        **os.environ,
        "LABEL_STUDIO_BASE_DATA_DIR": str(data),
        "LABEL_STUDIO_USERNAME": ADMIN_USER,
        "LABEL_STUDIO_PASSWORD": password,
        "LABEL_STUDIO_USER_TOKEN": token,
        "LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN": "true",
        "LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK": "true",
        "COLLECT_ANALYTICS": "false",
        "LATEST_VERSION_CHECK": "false",
        "SENTRY_DSN": "",
        "FRONTEND_SENTRY_DSN": "",
    }
    env.pop("LABEL_STUDIO_API_KEY", None)
    logfile = (sdir / "server.log").open("ab")
    proc = subprocess.Popen(
        [str(exe), "start", "--no-browser", "--internal-host", host, "--port", str(port), "--data-dir", str(data)],
        env=env, stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServerError(f"Label Studio exited with code {proc.returncode}; see {sdir / 'server.log'}")
        if _healthy(url):
            (sdir / "server.json").write_text(json.dumps({"url": url, "pid": proc.pid}))
            return Connection(url, token)
        time.sleep(0.3)
    _kill(proc.pid)
    raise ServerError(f"Label Studio did not become healthy on {url} within {timeout_s:.0f} s; see {sdir / 'server.log'}")


def _running(workspace: Path) -> Connection | None:
    info_path = state_dir(workspace) / "server.json"
    if not info_path.is_file():
        return None
    info = json.loads(info_path.read_text())
    if _alive(info["pid"]) and _healthy(info["url"]):
        return Connection(info["url"], (state_dir(workspace) / "token").read_text().strip())
    info_path.unlink()
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _kill(pid: int, sig: int = signal.SIGTERM, wait_s: float = 20.0) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        return
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _alive(pid):
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def stop(workspace: Path) -> bool:
    info_path = state_dir(workspace) / "server.json"
    if not info_path.is_file():
        return False
    info = json.loads(info_path.read_text())
    _kill(info["pid"])
    info_path.unlink(missing_ok=True)
    return True


def connect(workspace: Path) -> Connection:
    """`LABEL_STUDIO_URL` and `LABEL_STUDIO_API_KEY` for an existing server, else this workspace's own."""
    url, key = os.environ.get("LABEL_STUDIO_URL"), os.environ.get("LABEL_STUDIO_API_KEY")
    if url and key:
        return Connection(url.rstrip("/"), key)
    running = _running(workspace)
    if running is None:
        raise ServerError("no Label Studio: run `builder review serve`, or set LABEL_STUDIO_URL and LABEL_STUDIO_API_KEY")
    return running
