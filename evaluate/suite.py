"""A suite file: the models a release gate judges, each with its options, and what every one is evaluated on.

    methods: [direct, meta, selftranslate, m2c]
    langs: [de, en]                  # optional: every language of the release
    gates: ../data/gates.yaml        # optional: the gates file (relative to this file)
    prompt_variant: paper            # optional
    sample_m2c: 8                    # optional, as `eval run --sample-m2c` (also sample_selftranslate, sample_consistency)
    resources: {cpus: 4, mem: 16G, time: "2:00:00"}   # optional: each entry's Slurm job (`--executor slurm`)
    models:
      - name: smollm2                # its results folder: DIR/smollm2/
        gguf: default                # the platform's default model (SmolLM2-135M-Instruct)
      - name: smollm2-eos
        gguf: default
        bos: eos                     # the same weights under another BOS policy: another entry
      - name: my-model
        folder: ./models/my-model    # a local transformers folder (relative to this file)
        dtype: bfloat16
        device: cuda
        batch_size: 64
        resources: {gpus: 1, partition: gpu}   # merged over the suite's resources
      - name: llama
        hub: meta-llama/Llama-3.1-8B
        revision: 0e9e39f249a16976918f6564b8830bc894c89659
      - name: served
        endpoint: http://localhost:8000/v1
        served_model: meta-llama/Llama-3.1-70B
        score_endpoint: true         # the server echoes prompt log-probabilities

Each model names exactly one of `folder`, `gguf`, `hub` (with `revision`) and `endpoint` (with
`served_model`). A bad file is refused before any model is loaded, in one sentence naming the file, the
line and the field; so is a folder or file that does not exist. `resources` (`builder.cluster.Resources`:
gpus, cpus, mem, time, partition, account, sbatch) is what an entry's job asks Slurm for: the suite's
`resources`, with what the entry's own `resources` sets put over it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from builder.cluster import Resources
from builder.errors import InputError
from builder.records import PromptVariant, Record
from evaluate.methods import registry

SOURCES = ("folder", "gguf", "hub", "endpoint")
DEFAULT = "default"  # gguf: the platform's default model (builder.default_model)


class SuiteError(InputError):
    """A suite file that cannot be evaluated: where, and what is wrong."""


class ModelEntry(Record):
    """One model under one configuration; its results go to DIR/<name>/."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="the results folder's name")
    folder: Path | None = None
    gguf: str | None = None  # a GGUF file, or "default"
    hub: str | None = None
    revision: str | None = None
    endpoint: str | None = None
    served_model: str | None = None
    score_endpoint: bool = False
    concurrency: int = Field(16, ge=1)
    dtype: Literal["auto", "float32", "bfloat16", "float16", "fp32", "bf16", "fp16"] = "auto"
    bos: str = "auto"
    batch_size: int | None = Field(None, ge=1)
    device: str | None = None  # cpu, cuda, cuda:1, mps; default: --devices, else the best available
    resources: Resources = Resources()  # its Slurm job's; load_suite puts them over the suite's

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        given = [s for s in SOURCES if getattr(self, s) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(SOURCES)} (given: {', '.join(given) or 'none'})")
        if self.hub is not None and not self.revision:
            raise ValueError("a hub model needs its revision (a commit), so that its results say which weights were scored")
        if self.endpoint is not None and not self.served_model:
            raise ValueError("an endpoint needs served_model: the model's name on the server")
        if self.score_endpoint and self.endpoint is None:
            raise ValueError("score_endpoint is for an endpoint")
        return self

    @property
    def local(self) -> bool:
        return self.endpoint is None

    def path(self) -> str | None:
        """What `evaluate.models.load_model` is given: the folder, the GGUF file or the Hub id; None for the default."""
        if self.folder is not None:
            return str(self.folder)
        if self.gguf is not None:
            return None if self.gguf == DEFAULT else self.gguf
        return self.hub


class Suite(Record):
    models: list[ModelEntry] = Field(min_length=1)
    methods: list[str] = Field(min_length=1)
    langs: list[str] | None = None
    gates: Path | None = None
    prompt_variant: PromptVariant = "paper"
    sample_m2c: int | None = Field(None, ge=1)  # each as EvalOptions' field of that name: a stated sample, drawn by seed
    sample_selftranslate: int | None = Field(None, ge=1)
    sample_consistency: int | None = Field(None, ge=1)
    resources: Resources = Resources()  # every entry's Slurm job's, unless the entry sets its own
    source: Path | None = None  # the suite file, set when read

    @field_validator("models")
    @classmethod
    def _unique(cls, models: list[ModelEntry]) -> list[ModelEntry]:
        names = [m.name for m in models]
        if dup := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"two entries named {', '.join(dup)}: each name is a results folder")
        return models


def _node(root: yaml.Node, loc: tuple) -> yaml.Node:
    """The deepest node of the YAML tree that `loc` (a pydantic error location) reaches."""
    node = root
    for key in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == key), None)
            if found is None:
                break
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
            node = node.value[key]
        else:
            break
    return node


def _field(loc: tuple, data: dict) -> str:
    """A field as a person finds it: `models[1] (name smollm2-eos).dtype`."""
    out = ""
    for i, key in enumerate(loc):
        if isinstance(key, int):
            out += f"[{key}]"
            if loc[i - 1] == "models" and isinstance(data.get("models"), list) and isinstance(data["models"][key], dict):
                if name := data["models"][key].get("name"):
                    out += f" ({name})"
        elif not re.fullmatch(r"[a-z_][a-z0-9_]*", str(key)) or key in ("function-after", "function-before"):
            continue
        else:
            out += f".{key}" if out else str(key)
    return out or "(top level)"


def load_suite(path: Path) -> Suite:
    """The suite in `path`, its relative paths made relative to the file; a folder or file named in it must exist."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except OSError as exc:
        raise SuiteError(f"{path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise SuiteError(f"{path}: not YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise SuiteError(f"{path}:1: expected a mapping with models and methods")
    try:
        suite = Suite.model_validate({**data, "source": path})
    except ValidationError as exc:
        e = exc.errors()[0]
        line = _node(root, e["loc"]).start_mark.line + 1
        raise SuiteError(f"{path}:{line}: field {_field(e['loc'], data)}: {e['msg'].removeprefix('Value error, ')}") from exc
    known = registry()
    if unknown := [m for m in suite.methods if m not in known]:
        line = _node(root, ("methods",)).start_mark.line + 1
        raise SuiteError(f"{path}:{line}: field methods: unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}")
    base = path.parent

    def where(i: int, key: str) -> str:
        return f"{path}:{_node(root, ('models', i, key)).start_mark.line + 1}: field models[{i}] ({suite.models[i].name}).{key}"

    models = []
    for i, m in enumerate(suite.models):
        update = {"resources": suite.resources.model_copy(update=m.resources.model_dump(exclude_unset=True))}
        for key in ("folder", "gguf"):
            value = getattr(m, key)
            if value is None or value == DEFAULT:
                continue
            full = (base / Path(value).expanduser()).resolve()
            if not full.exists():
                raise SuiteError(f"{where(i, key)}: {full} does not exist")
            update[key] = full if key == "folder" else str(full)
        models.append(m.model_copy(update=update))
    gates = suite.gates
    if gates is not None:
        gates = (base / gates).resolve()
        if not gates.is_file():
            line = _node(root, ("gates",)).start_mark.line + 1
            raise SuiteError(f"{path}:{line}: field gates: {gates} does not exist")
    return suite.model_copy(update={"models": models, "gates": gates, "source": path.resolve()})
