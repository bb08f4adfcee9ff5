"""Float32 linear layers on a CPU through oneDNN instead of the BLAS.

PyTorch's x86 wheels run a float32 `F.linear` through MKL, which takes its AVX2 code paths on AMD
CPUs whatever they support. On this project's machines (AMD EPYC, Zen 5, AVX-512) that is about 220
GFLOPS on two cores against 440-480 for oneDNN, which ships in the same wheels and picks its kernels
by instruction set alone (`bench/cpu_linear.py`: SmolLM2's layers 1.9x faster, its scoring 1.9x,
its generation 1.7x). Only a single row through a small layer is slower (a call's fixed cost), and
the output layer more than makes up for it. Both compute the same float32 products, added in
another order. Half-precision linears already run through oneDNN. A routed layer falls back to
`F.linear` whenever autograd records, so a model can still be trained.

Every input shape makes a primitive, and two caches keep up to 1,024 of them each: oneDNN's own
(`ONEDNN_PRIMITIVE_CACHE_CAPACITY`) and that of ideep, PyTorch's layer over it (`LRU_CACHE_CAPACITY`),
about 0.3 MiB per shape in each for SmolLM2's 576 -> 1536 layer and more for its output layer.
Packed scoring gives nearly every batch a new width, so meta on the demo release kept some 450 MiB
in them. Both are capped at `PRIMITIVE_CACHE` unless the environment sets them. They are read once,
when the first primitive is made, so `available` sets them before it makes one; a process that ran
oneDNN before keeps the capacities it started with.
"""

from __future__ import annotations

import os
from functools import cache

import torch

PRIMITIVE_CACHE = 64  # the shapes of a generation batch's steps are all reused; a scoring batch's are not
CACHE_CAPACITIES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


class OneDnnLinear(torch.nn.Linear):
    """A `Linear` whose float32 inference on a CPU runs through oneDNN; anything else as `Linear` runs it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (x.dtype == w.dtype == torch.float32 and x.device.type == w.device.type == "cpu"
                and not (torch.is_grad_enabled() and (x.requires_grad or w.requires_grad))):
            return _onednn(x, w, self.bias)
        return super().forward(x)


@cache
def available() -> bool:
    """Whether this PyTorch has oneDNN's linear and it gives `F.linear`'s products (checked once, on a small case)."""
    if not torch.backends.mkldnn.is_available():
        return False
    for cache_capacity in CACHE_CAPACITIES:
        os.environ.setdefault(cache_capacity, str(PRIMITIVE_CACHE))
    g = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*shape, generator=g) for shape in ((3, 5, 64), (48, 64), (48,)))
    try:
        with torch.inference_mode():
            return bool(torch.allclose(_onednn(x, w, b), torch.nn.functional.linear(x, w, b), rtol=1e-5, atol=1e-5))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def route_linears(model: torch.nn.Module) -> int:
    """Make the model's `Linear` layers (exactly that class: a subclass has its own forward) `OneDnnLinear`s, where
    oneDNN is available; their parameters, ties and hooks stay as they are. Returns how many were routed."""
    if not available():
        return 0
    layers = [m for m in model.modules() if type(m) is torch.nn.Linear]
    for m in layers:
        m.__class__ = OneDnnLinear
    return len(layers)
