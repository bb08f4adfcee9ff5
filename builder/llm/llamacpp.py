"""A real OpenAI-compatible server on this machine: llama.cpp's, serving SmolLM2-135M-Instruct.

It checks the client against a server that was not written for it (the stand-in was). Like Label
Studio it lives in an environment of its own, installed from `requirements/llama-cpp-python.lock`
(`builder.environments`; `BUILDER_LLAMA_CPP_VENV` names one of yours instead): `llama-cpp-python[server]`
compiles llama.cpp from source, which takes 12-20 minutes on a fresh machine and seconds where pip's
cache holds the built wheel. The model is the platform's default (`builder.default_model`).
`LlamaServer` runs it on a free loopback port; the model's name on the wire is the path it was
started with.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from builder.child_env import child_env
from builder.default_model import gguf_path
from builder.environments import ToolEnvironment
from builder.errors import BuilderError

LLAMA_CPP = ToolEnvironment("llama-cpp-python")

__all__ = ["LLAMA_CPP", "LlamaServer", "LlamaServerError", "ensure_installed"]


class LlamaServerError(BuilderError):
    pass


def ensure_installed(log=print) -> Path:
    """The environment's Python, with llama-cpp-python's server installed (compiled) if it is not there yet."""
    own = os.environ.get("BUILDER_LLAMA_CPP_VENV")
    venv = LLAMA_CPP.ensure(Path(own) if own else None, log=log)
    return venv / "bin" / "python"


class LlamaServer:
    """`with LlamaServer(log_path) as srv:` serves the model at `srv.base_url` (loopback, a free port) as `srv.model`."""

    def __init__(self, log_path: Path, *, n_ctx: int = 4096, prompt_cache: bool = True,
                 start_timeout_s: float = 120.0) -> None:
        self.exe = ensure_installed()
        self.model = str(gguf_path())
        self.n_ctx, self.prompt_cache = n_ctx, prompt_cache
        self.log_path = log_path
        self.start_timeout_s = start_timeout_s
        self.port = _free_port()
        self._proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> LlamaServer:
        cmd = [str(self.exe), "-m", "llama_cpp.server", "--model", self.model, "--host", "127.0.0.1", "--port", str(self.port),
               "--n_ctx", str(self.n_ctx), "--n_threads", "-1", "--n_threads_batch", "-1",
               # With the cache, a re-ask's conversation start is not evaluated again; scoring echoed prompts turns it off.
               "--cache", "true" if self.prompt_cache else "false"]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          env=child_env())
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
