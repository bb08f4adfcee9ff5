"""The environment a child process starts with: built for it from an allow-list, never a copy of ours.

Ours holds secrets meant for one place each: `OPENAI_API_KEY` and a base URL with credentials for the
LLM endpoint, `HF_TOKEN` for the Hub, `LABEL_STUDIO_API_KEY` for a team's Label Studio, `PGPASSWORD`
for the workspace's database. A child process (our Label Studio, llama.cpp's server, git, the
reference scorers, pip) needs none of them, and whatever it is given can end up in its logs, its
crash reports or its data folder. So each gets what every program needs to run here (`PASSED`), the
names its caller adds (`also`: a name, or a prefix ending in `_`), and the values its caller sets.

Standard library only: `builder.environments` uses it before any dependency is installed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

# Where things are, who runs them, in which language and time zone, with which certificates and how many threads.
PASSED = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_", "TZ", "TMPDIR", "TERM",
          "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR", "SSL_CERT_FILE", "SSL_CERT_DIR",
          "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
# What an install needs besides: pip's own settings, the network's proxies, and a compiler's (llama.cpp is built).
INSTALLER = ("PIP_", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
             "REQUESTS_CA_BUNDLE", "CMAKE_", "FORCE_CMAKE", "CC", "CXX", "CFLAGS", "CXXFLAGS", "LDFLAGS", "MAKEFLAGS",
             "CUDA_HOME", "CUDACXX")


def _allowed(name: str, names: tuple[str, ...]) -> bool:
    return any(name == n or (n.endswith("_") and name.startswith(n)) for n in names)


def child_env(*, also: Iterable[str] = (), **values: str) -> dict[str, str]:
    """`PASSED` and the names in `also` as this process has them, then `values` (which win)."""
    names = PASSED + tuple(also)
    return {**{k: v for k, v in os.environ.items() if _allowed(k, names)}, **values}
