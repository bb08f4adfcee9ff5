"""Label Studio as a real server: installed into its own environment, run on loopback, stopped.

The project depends only on `label-studio-sdk`; the server (a Django application with many pinned
dependencies) lives in a virtual environment of its own, installed from `requirements/label-studio.lock`
into a folder named for its version (`builder.environments`). Its data directory is inside the
workspace, and its API token is generated and kept in a 0600 file: `LABEL_STUDIO_API_KEY` is a team
server's key (`connect`), never stored here. The server's environment is built for it (`builder.child_env`):
none of our secrets reach its process, its log or its data directory.

A server is known by its identity, never by its URL (a restart picks a new port): for a server we
start, an id written once into its data directory (`local:…`); for one given by `LABEL_STUDIO_URL`,
its organization's id and creation time, which stay in its database whatever URL it answers on
(`org:…`), or the URL itself where the server does not show them (`url:…`). The workspace keys its
review projects and annotations by that identity. `server.json` records which data directory the
running server serves, so a copied or moved workspace never talks to, or stops, the server another
workspace started: it starts its own on its own copy of the data.
"""

from __future__ import annotations

import functools
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

from builder.child_env import child_env
from builder.environments import ToolEnvironment
from builder.errors import BuilderError
from builder.files import write_text

LABEL_STUDIO = ToolEnvironment("label-studio")
ADMIN_USER = "admin@builder.local"
SERVER_ID_FILE = "builder-server-id"
SERVER_BY_URL = "url:"  # the identity of an external server that does not show its organization: its URL


class ServerError(BuilderError):
    pass


@dataclass(frozen=True)
class Connection:
    url: str
    token: str
    server: str  # the server's identity, which the workspace keys its projects and annotations by

    def __repr__(self) -> str:  # never show the token
        return f"Connection(url={self.url!r}, server={self.server!r}, token=<hidden>)"

    def client(self):
        """Label Studio's SDK client for this server (`sdk_client`)."""
        return sdk_client(self.url, self.token)


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
    env = child_env(LABEL_STUDIO_BASE_DATA_DIR=str(building), COLLECT_ANALYTICS="false", LATEST_VERSION_CHECK="false",
                    SENTRY_DSN="", FRONTEND_SENTRY_DSN="")
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


def label_studio_data(workspace: Path) -> Path:
    """The workspace's Label Studio data directory, as an absolute path (what `server.json` records)."""
    return (state_dir(workspace) / "data").resolve()


def server_identity(data: Path) -> str:
    """The identity of the server on data directory `data`: `local:<random id>`, written there once.

    The id travels with the data: a copy of the directory holds the same projects, tasks and
    annotation ids, so a copied workspace's records stay valid against the server it starts on its copy.
    """
    path = data / SERVER_ID_FILE
    if not path.is_file():
        fd, tmp = tempfile.mkstemp(dir=data, prefix=".server-id-")
        with os.fdopen(fd, "w") as fh:
            fh.write(f"local:{secrets.token_hex(16)}\n")
        try:
            os.link(tmp, path)  # atomic, and never replaces an id another process wrote first
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return path.read_text().strip()


def external_identity(url: str, token: str) -> str:
    """The identity of a server we did not start: `org:<id>@<created>` of the organization the token
    belongs to, else (a server that does not show it) `url:<url>`."""
    from label_studio_sdk.core.api_error import ApiError

    ls = sdk_client(url, token)
    org, created = None, {}
    try:
        org = ls.users.whoami().active_organization
        created = {o.id: o.created_at for o in ls.organizations.list()}
    except ApiError as exc:
        if exc.status_code not in (403, 404):
            raise
    return f"org:{org}@{created[org].isoformat()}" if org in created else f"{SERVER_BY_URL}{url}"


def lost(url: str, exc: Exception) -> str:
    """What to say when Label Studio at `url` does not answer: that server, and what to do."""
    return (f"Label Studio at {url} did not answer ({type(exc).__name__}: {exc}): if it stopped or crashed, start it "
            "again (`builder review serve`; a team's server, its admin) and run the command again, which skips what "
            "the server already holds")


@functools.cache
def _lost_type(kind: type[Exception]) -> type[Exception]:
    """The httpx error `kind` that is also a `ServerError`: the SDK retries it as the httpx error it is, and the
    command line shows it as one line, as what a user can fix."""
    return type(kind.__name__, (kind, ServerError), {})


def sdk_client(url: str, token: str):
    """Label Studio's SDK client for the server at `url`, whose connection errors name the server and say what to do
    (`lost`). They keep their httpx types, so the SDK still retries them as it does."""
    import httpx
    from label_studio_sdk import LabelStudio

    class Named(httpx.HTTPTransport):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            try:
                return super().handle_request(request)
            except httpx.TransportError as exc:
                raise _lost_type(type(exc))(lost(url, exc), request=request) from exc

    http = httpx.Client(timeout=60, follow_redirects=True, transport=Named())  # the SDK's own defaults
    return LabelStudio(base_url=url, api_key=token, httpx_client=http)


def _write_secret(path: Path, value: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, value, mode=0o600)


def _secret(path: Path) -> str:
    """This workspace's own secret kept in `path`, made the first time."""
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
    """Start Label Studio for this workspace (or return the one it already runs) and wait until healthy."""
    check_bind(host, allow_remote)
    running = _running(workspace, log)
    if running:
        return running
    exe = ensure_installed(log=log)
    sdir = state_dir(workspace)
    data = label_studio_data(workspace)
    if not (data / "label_studio.sqlite3").exists():
        shutil.copytree(migrated_template(log=log), data, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".env"))
        _write_secret(data / ".env", f"SECRET_KEY={secrets.token_urlsafe(50)}\n")  # never shared between workspaces
    server = server_identity(data)
    token = _secret(sdir / "token")  # never LABEL_STUDIO_API_KEY: that is the key of a team's server (`connect`)
    password = _secret(sdir / "password")
    port = port or _free_port(host)
    env = child_env(
        LABEL_STUDIO_BASE_DATA_DIR=str(data),
        LABEL_STUDIO_USERNAME=ADMIN_USER,
        LABEL_STUDIO_PASSWORD=password,
        LABEL_STUDIO_USER_TOKEN=token,
        LABEL_STUDIO_ENABLE_LEGACY_API_TOKEN="true",
        LABEL_STUDIO_DISABLE_SIGNUP_WITHOUT_LINK="true",
        COLLECT_ANALYTICS="false",
        LATEST_VERSION_CHECK="false",
        SENTRY_DSN="",
        FRONTEND_SENTRY_DSN="",
    )
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
            write_text(sdir / "server.json", json.dumps({"url": url, "pid": proc.pid, "data_dir": str(data)}))
            return Connection(url, token, server)
        time.sleep(0.3)
    _kill(proc.pid)
    raise ServerError(f"Label Studio did not become healthy on {url} within {timeout_s:.0f} s; see {sdir / 'server.log'}")


def _serves(pid: int, data: Path) -> bool | None:
    """Whether process `pid` is a Label Studio started on data directory `data`; None where the
    system cannot tell (no /proc)."""
    if not Path("/proc/self").is_dir():
        return None
    proc = Path("/proc") / str(pid)
    try:
        args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        cwd = Path(os.readlink(proc / "cwd"))
    except OSError:
        return False
    given = args[args.index("--data-dir") + 1] if "--data-dir" in args[:-1] else None
    return given is not None and (cwd / given).resolve() == data


def _own_record(workspace: Path, log=print) -> dict | None:
    """The record of the server this workspace started, while its process lives.

    A stale record is removed. So is one that names another data directory: it came with a copied or
    moved workspace and belongs to the server of the original, which is left alone. A record written
    before records named their data directory counts where the process itself shows it serves ours.
    """
    path = state_dir(workspace) / "server.json"
    if not path.is_file():
        return None
    info = json.loads(path.read_text())
    data = label_studio_data(workspace)
    recorded = info.get("data_dir")
    if recorded not in (None, str(data)):
        log(f"{path} is the record of the Label Studio serving {recorded} (pid {info['pid']}, {info['url']}); "
            "this workspace was copied or moved from there: it leaves that server alone and uses its own")
    else:
        serves = _serves(info["pid"], data) if _alive(info["pid"]) else False
        if serves or (serves is None and recorded is not None):
            return info
    path.unlink()
    return None


def _running(workspace: Path, log=print) -> Connection | None:
    info = _own_record(workspace, log)
    if info is None:
        return None
    if _healthy(info["url"]):
        return Connection(info["url"], (state_dir(workspace) / "token").read_text().strip(),
                          server_identity(label_studio_data(workspace)))
    (state_dir(workspace) / "server.json").unlink()
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


def stop(workspace: Path, log=print) -> bool:
    """Stop the server this workspace started; False when it runs none (another workspace's is never stopped)."""
    info = _own_record(workspace, log)
    if info is None:
        return False
    _kill(info["pid"])
    (state_dir(workspace) / "server.json").unlink(missing_ok=True)
    return True


def connect(workspace: Path, log=print) -> Connection:
    """`LABEL_STUDIO_URL` and `LABEL_STUDIO_API_KEY` for an existing server, else this workspace's own."""
    url, key = os.environ.get("LABEL_STUDIO_URL"), os.environ.get("LABEL_STUDIO_API_KEY")
    if url and key:
        return Connection(url.rstrip("/"), key, external_identity(url.rstrip("/"), key))
    running = _running(workspace, log)
    if running is None:
        raise ServerError("no Label Studio: run `builder review serve`, or set LABEL_STUDIO_URL and LABEL_STUDIO_API_KEY")
    return running
