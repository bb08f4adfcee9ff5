"""Loading a causal language model for evaluation: from a local folder, a GGUF file (or a folder holding
one) or a Hub id.

Device, dtype and batch size are chosen automatically from what the machine offers (pure functions
of its capabilities, so the GPU choice is testable anywhere) and can be overridden. On a CPU the
model's linear layers run through oneDNN (`evaluate.onednn`). Results must name exactly which
weights were scored: a Hub model records its commit, a local one the sha256 of its weight files, a
GGUF file also its own sha256 (it is converted once, `evaluate.gguf`). Weight files are checked against
their headers first (`evaluate.model_files`): a truncated one is named, with the likely cause.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import transformers
from pydantic import BaseModel, ConfigDict
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from builder.default_model import gguf_path
from builder.errors import InputError
from evaluate import gguf, model_files, onednn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
CPU_BATCH_BYTES = 1 << 30


class Capabilities(BaseModel):
    """What the machine offers, as far as model placement is concerned."""

    model_config = ConfigDict(frozen=True)
    cuda: bool = False
    cuda_bf16: bool = False
    cuda_free_bytes: int = 0
    mps: bool = False


def detect_capabilities() -> Capabilities:
    if torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return Capabilities(cuda=True, cuda_bf16=torch.cuda.is_bf16_supported(), cuda_free_bytes=free)
    return Capabilities(mps=bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()))


def choose_device(requested: str | None, caps: Capabilities) -> str:
    if requested and requested != "auto":
        if requested.startswith("cuda") and not caps.cuda:
            raise InputError(f"--device {requested}: no CUDA device is available here")
        return requested
    return "cuda" if caps.cuda else "mps" if caps.mps else "cpu"


def choose_dtype(requested: str | None, device: str, caps: Capabilities) -> str:
    """bf16 on GPUs that have it, else fp16 on accelerators; fp32 on CPU, where half precision is slow."""
    if requested and requested != "auto":
        name = DTYPE_ALIASES.get(requested, requested)
        if name not in DTYPES:
            raise InputError(f"--dtype {requested}: expected one of {', '.join([*DTYPES, *DTYPE_ALIASES])}")
        return name
    if device.startswith("cuda"):
        return "bfloat16" if caps.cuda_bf16 else "float16"
    if device == "mps":
        return "float16"
    return "float32"


def choose_batch_size(requested: int | None, device: str, caps: Capabilities, *, vocab_size: int, hidden_size: int,
                      n_layers: int, model_bytes: int, max_tokens: int = 64) -> int:
    """Sentences per forward pass: as many as the activation budget holds (at most 512 on a GPU).

    Per sentence a pass keeps float32 logits twice (logits, log-softmax: tokens x vocab) and, when
    probing, every layer's hidden states (tokens x hidden x layers). The budget is half the free
    GPU memory after the model, or 1 GiB on a CPU, where batches beyond 64 only add padding.
    """
    if requested:
        if requested < 1:
            raise InputError(f"--batch-size must be at least 1, not {requested}")
        return requested
    per_sentence = max_tokens * (vocab_size * 4 * 2 + hidden_size * (n_layers + 1) * 2)
    if device.startswith("cuda"):
        return int(min(max((caps.cuda_free_bytes - model_bytes) // 2 // per_sentence, 1), 512))
    return int(min(max(CPU_BATCH_BYTES // per_sentence, 1), 64))


class ModelInfo(BaseModel):
    """Everything results must say about the model that produced them."""

    model_config = ConfigDict(frozen=True)
    name: str
    source: Literal["local", "hub", "control", "endpoint", "recording"]
    revision: str | None
    weights_sha256: str | None
    architecture: str
    n_params: int
    n_layers: int
    hidden_size: int
    device: str
    dtype: str
    batch_size: int
    toy: bool = False
    gguf_file: str | None = None  # the GGUF file the weights were converted from, and its sha256
    gguf_sha256: str | None = None


@dataclass
class LoadedModel:
    model: Any
    tokenizer: PreTrainedTokenizerBase
    info: ModelInfo

    @property
    def device(self) -> torch.device:
        return torch.device(self.info.device)


def weights_sha256(folder: Path) -> str:
    """One digest over every weight file (name and content), independent of listing order."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES))
    if not files:
        raise InputError(f"{folder}: no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    outer = hashlib.sha256()
    for p in files:
        outer.update(f"{p.name}\0{gguf.file_sha256(p)}\n".encode())
    return outer.hexdigest()


def _resolve(name_or_path: str, revision: str | None) -> tuple[Path, Literal["local", "hub"], str | None]:
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise InputError(f"{path}: not a model folder (no config.json) nor a GGUF file or a folder holding one")
        return path, "local", None
    from huggingface_hub import snapshot_download

    folder = Path(snapshot_download(name_or_path, revision=revision))
    return folder, "hub", folder.name  # snapshot folders are named by commit


def load_model(name_or_path: str | Path | None = None, *, device: str | None = None, dtype: str | None = None,
               batch_size: int | None = None, revision: str | None = None, caps: Capabilities | None = None,
               log=lambda message: None) -> LoadedModel:
    """The model at `name_or_path`; None: the default model (SmolLM2-135M-Instruct, `builder.default_model`)."""
    caps = caps or detect_capabilities()
    name_or_path = name_or_path if name_or_path is not None else gguf_path()
    source_file = gguf.gguf_file(Path(name_or_path).expanduser())
    conversion = {}
    if source_file is not None:
        model_files.check_file(source_file)
        converted_dir, conversion = gguf.converted(source_file, log=log)
        folder, source, commit = converted_dir, "local", None
    else:
        folder, source, commit = _resolve(str(name_or_path), revision)
    model_files.check_folder(folder)
    dev = choose_device(device, caps)
    dt = choose_dtype(dtype, dev, caps)
    transformers.utils.logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if not tokenizer.is_fast:
        raise InputError(f"{name_or_path}: scoring needs a fast tokenizer (character offsets)")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=DTYPES[dt]).to(dev).eval()
    if dev == "cpu":
        onednn.route_linears(model)
    info = _info(model, str(name_or_path), source, commit, weights_sha256(folder) if source == "local" else None,
                 dev, dt, batch_size, caps)
    if conversion:
        info = info.model_copy(update={"gguf_file": conversion["source_file"], "gguf_sha256": conversion["source_sha256"]})
    return LoadedModel(model, tokenizer, info)


def _info(model, name, source, revision, digest, device, dtype, batch_size, caps) -> ModelInfo:
    cfg = model.config
    n_params = sum(p.numel() for p in model.parameters())
    model_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return ModelInfo(
        name=name, source=source, revision=revision, weights_sha256=digest,
        architecture=(cfg.architectures or [type(model).__name__])[0], n_params=n_params,
        n_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size, device=device, dtype=dtype,
        batch_size=choose_batch_size(batch_size, device, caps, vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                                     n_layers=cfg.num_hidden_layers, model_bytes=model_bytes),
        toy=bool(getattr(cfg, "toy", False)),
    )


def random_model(config, tokenizer: PreTrainedTokenizerBase, *, name: str, device: str | None = None,
                 dtype: str | None = None, batch_size: int | None = None, seed: int = 0,
                 caps: Capabilities | None = None) -> LoadedModel:
    """Freshly initialised weights of `config`, made on the device itself: a model's speed without its weights (an
    8B configuration on a GPU), and the random control that probes are compared with."""
    caps = caps or detect_capabilities()
    dev = choose_device(device, caps)
    dt = choose_dtype(dtype, dev, caps)
    torch.manual_seed(seed)
    with torch.device(dev):
        model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=DTYPES[dt]).eval()
    if dev == "cpu":
        onednn.route_linears(model)
    return LoadedModel(model, tokenizer, _info(model, name, "control", None, None, dev, dt, batch_size, caps))


def random_control(loaded: LoadedModel, seed: int = 0) -> LoadedModel:
    """The same architecture with freshly initialised weights: what probes find without training."""
    info, name = loaded.info, f"{loaded.info.name} (random init, seed {seed})"
    model = random_model(loaded.model.config, loaded.tokenizer, name=name, device=info.device, dtype=info.dtype, seed=seed).model
    return LoadedModel(model, loaded.tokenizer, info.model_copy(update={"name": name, "source": "control", "revision": None,
                                                                        "weights_sha256": None}))
