"""A CPU model's float32 linear layers run through oneDNN (`evaluate.onednn`): the products `F.linear` gives, the
oneDNN kernel really taken (seen by the profiler), and anything that is not float32 inference left to PyTorch."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from transformers import AutoModelForCausalLM

from evaluate import onednn
from evaluate.models import LoadedModel, load_model
from evaluate.onednn import OneDnnLinear, route_linears
from evaluate.scoring import Scorer

# PyTorch's x86-64 wheels, which CI and every machine of this project install, ship oneDNN: there it must be taken.
pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="routing is measured and tested on x86-64, whose PyTorch wheels ship oneDNN")

ONEDNN_OP = "mkldnn::_linear_pointwise"


def ops(fn) -> set[str]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()}


def mlp(dtype: torch.dtype = torch.float32) -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 48), torch.nn.SiLU(), torch.nn.Linear(48, 32, bias=False)).to(dtype)


class Scaled(torch.nn.Linear):
    """A subclass with a forward of its own, which routing must leave alone."""

    def forward(self, x):
        return 2 * super().forward(x)


def test_this_pytorch_has_onednns_linear():
    assert onednn.available()


@pytest.mark.parametrize("shape", [(7, 64), (3, 5, 64), (0, 64), "transposed"])
def test_routed_layers_give_linears_products_through_onednn(shape):
    x = torch.randn(5, 3, 64).transpose(0, 1) if shape == "transposed" else torch.randn(*shape)
    plain, routed = mlp(), mlp()
    assert route_linears(routed) == 2 and all(type(m) is OneDnnLinear for m in (routed[0], routed[2]))
    with torch.inference_mode():
        expected, got = plain(x), routed(x)
        assert ONEDNN_OP in ops(lambda: routed(x)) and ONEDNN_OP not in ops(lambda: plain(x))
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # no autograd record either way: routed
        assert ONEDNN_OP in ops(lambda: routed(x))


def test_with_autograd_recording_a_routed_layer_is_linear_itself_so_a_model_still_trains():
    plain, routed = mlp(), mlp()
    route_linears(routed)
    x = torch.randn(4, 64)
    assert ONEDNN_OP not in ops(lambda: routed(x).sum().backward())
    plain(x).sum().backward()
    for a, b in zip(plain.parameters(), routed.parameters()):
        assert torch.equal(a.grad, b.grad)


def test_half_precision_and_subclasses_are_left_to_pytorch():
    plain, routed = mlp(torch.bfloat16), mlp(torch.bfloat16)
    route_linears(routed)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.inference_mode():
        assert ONEDNN_OP not in ops(lambda: routed(x))
        assert torch.equal(routed(x), plain(x))
    model = torch.nn.Sequential(Scaled(8, 8), torch.nn.Linear(8, 8))
    assert route_linears(model) == 1 and type(model[0]) is Scaled


def test_a_cpu_model_loads_routed_and_scores_as_the_plain_model_does(toy_dir):
    loaded = load_model(toy_dir, device="cpu", dtype="float32")
    linears = [m for m in loaded.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(type(m) is OneDnnLinear for m in linears)
    plain = LoadedModel(AutoModelForCausalLM.from_pretrained(toy_dir).eval(), loaded.tokenizer, loaded.info)
    assert not any(type(m) is OneDnnLinear for m in plain.model.modules())
    texts = [("", "A toaster is used for heating food."), ("", "A kettle is used for heating food."),
             ("Which is used for heating food?", " A toaster")]
    routed_scores, plain_scores = Scorer(loaded).score(texts), Scorer(plain).score(texts)
    for key in texts:
        np.testing.assert_allclose(routed_scores[key].logprobs, plain_scores[key].logprobs, rtol=0, atol=1e-5)


SHAPES_SCRIPT = """
import ctypes, re, sys
from pathlib import Path
import torch
from evaluate import onednn

def resident_mib():
    return int(re.search(r"^VmRSS:\\s+(\\d+)", Path("/proc/self/status").read_text(), re.M).group(1)) / 1024

assert onednn.available()
layer = torch.nn.Linear(576, 1536)
onednn.route_linears(torch.nn.Sequential(layer))
with torch.inference_mode():
    layer(torch.randn(1, 576))
    start = resident_mib()
    for rows in range(2, 602):  # a new input shape each call, as packed scoring makes them
        layer(torch.randn(rows, 576))
ctypes.CDLL("libc.so.6").malloc_trim(0)
print(resident_mib() - start)
"""


def memory_kept_by_shapes(**env: str) -> float:
    """MiB a fresh process keeps after a routed layer has run 600 input shapes (freed memory given back first)."""
    environ = {k: v for k, v in os.environ.items() if k not in onednn.CACHE_CAPACITIES}
    done = subprocess.run([sys.executable, "-c", SHAPES_SCRIPT], capture_output=True, text=True, check=True,
                          env={**environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), **env})
    return float(done.stdout)


@pytest.mark.skipif(platform.system() != "Linux", reason="reads /proc and calls glibc's malloc_trim")
def test_caches_of_input_shapes_are_capped_unless_the_environment_sets_them():
    capped = memory_kept_by_shapes()
    libraries_default = memory_kept_by_shapes(**dict.fromkeys(onednn.CACHE_CAPACITIES, "1024"))
    # About 0.3 MiB per shape in each of the two caches: some 350 MiB kept at the libraries' capacity of 1,024.
    assert capped < 100 < 200 < libraries_default, (capped, libraries_default)
