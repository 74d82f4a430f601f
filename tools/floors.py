"""The hardware's floors under a forward pass: the time to read what it must read, and to do its arithmetic.

A forward of n new tokens on a cache of c positions reads every weight once,
whatever n (the input embeddings only for n rows, so they count only when the
output head shares them), and the cache once:

    memory floor(n, c)  = (weight bytes + KV bytes per position · (c + n)) / read bandwidth

and does two FLOPs per weight per token in its matrix products, plus QKᵀ and
PV over every cached column (a tree's mask hides some; the kernels compute
them all the same):

    compute floor(n, c) = (2 · matmul weights · n + 4 · layers · heads · d · n · (c + n)) / GEMM rate

Both rates are measured on the device itself: the read bandwidth by summing a
tensor far larger than the caches, the GEMM rate by a 256×2048×2048 product
in the dtype the model's arithmetic runs in (`arithmetic_dtype`: a bfloat16
model's on a CPU without bf16 instructions is float32, the kernel's AVX2 path
widening every operand; torch's own bf16 GEMM there runs at a few GFLOP/s and
is no floor of anything). A measured forward over its floors says how much of the
hardware it leaves unused: a one-token forward is memory-bound, a wide tree
compute-bound.

`specscope profile` samples both rates between its timed passes (`RateSampler`)
and summarises them as it summarises the forwards (median, or best with
`--statistic min`): on a shared VM the bandwidth moves by 2× within minutes,
and a floor read in one quiet burst is not the floor of forwards timed in
another moment. The best sample is kept beside it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from engine.models.device import cpu_has_native_bf16

READ_MIB = 512
GEMM_SHAPE = (256, 2048, 2048)


@dataclass
class Floors:
    weight_bytes: int  # read once per forward
    kv_bytes_per_position: int  # keys and values of one cached position, all layers
    matmul_weights: int  # weights in matrix products (two FLOPs each per token)
    attention_flops_per_pair: int  # FLOPs of QKᵀ and PV per (new token, cached column)
    read_gb_s: float
    gemm_gflops: float
    read_gb_s_best: float | None = None  # the best sample where the rates were sampled (RateSampler)
    read_gb_s_worst: float | None = None  # and the slowest: far apart, the table's ratios mix two machines
    gemm_gflops_best: float | None = None
    samples: int = 0  # rate samples taken between the timed forwards; 0: measured once, best of 5
    gemm_dtype: str | None = None  # the dtype the GEMM rate was measured in (arithmetic_dtype); None: the model's

    def memory_ms(self, n: int, context: int) -> float:
        return (self.weight_bytes + self.kv_bytes_per_position * (context + n)) / (self.read_gb_s * 1e6)

    def compute_ms(self, n: int, context: int) -> float:
        flops = 2 * self.matmul_weights * n + self.attention_flops_per_pair * n * (context + n)
        return flops / (self.gemm_gflops * 1e6)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Floors":
        return cls(**data)


def model_floors(model: torch.nn.Module, read_gb_s: float, gemm_gflops: float) -> Floors:
    """The byte and FLOP counts of a Hugging Face causal LM, with the measured rates."""
    config = model.config
    embeddings = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    tied = output is not None and output.weight.data_ptr() == embeddings.data_ptr()
    weight_bytes = matmul_weights = 0
    seen: set[int] = set()
    for param in model.parameters():
        if param.data_ptr() in seen or (param is embeddings and not tied):
            continue  # a tied head is read once; untied input embeddings only for n rows
        seen.add(param.data_ptr())
        weight_bytes += param.numel() * param.element_size()
        if param.dim() == 2:
            matmul_weights += param.numel()
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    layers = config.num_hidden_layers
    itemsize = embeddings.element_size()
    gemm_dtype = str(arithmetic_dtype(embeddings.dtype, embeddings.device)).removeprefix("torch.")
    return Floors(weight_bytes=weight_bytes, kv_bytes_per_position=2 * layers * kv_heads * head_dim * itemsize,
                  matmul_weights=matmul_weights, attention_flops_per_pair=4 * layers * heads * head_dim,
                  read_gb_s=read_gb_s, gemm_gflops=gemm_gflops, gemm_dtype=gemm_dtype)


def _best_seconds(fn, device: torch.device, repeats: int, touch: bool = True) -> float:
    if touch:
        fn()  # first touch: page faults and lazy initialisation are no part of the rate
    best = float("inf")
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        fn()
        _synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def measure_read_gb_s(device: torch.device, mib: int = READ_MIB, repeats: int = 5) -> float:
    """GB/s of summing a float32 tensor of `mib` MiB (the best of `repeats`: closest to an idle machine)."""
    probe = MemoryProbe(device, mib)
    return max(probe.read() for _ in range(repeats))


def arithmetic_dtype(dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype a forward of `dtype` multiplies in: float32 for bfloat16 on a CPU without bf16 instructions."""
    if dtype == torch.bfloat16 and device.type == "cpu" and not cpu_has_native_bf16():
        return torch.float32
    return dtype


def measure_gemm_gflops(dtype: torch.dtype, device: torch.device, repeats: int = 5) -> float:
    """GFLOP/s of a 256×2048×2048 matrix product in `dtype` (the best of `repeats`)."""
    m, k, n = GEMM_SHAPE
    dtype = arithmetic_dtype(dtype, device)
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    seconds = _best_seconds(lambda: a @ b, device, repeats)
    return 2 * m * k * n / seconds / 1e9


def measure_floors(model: torch.nn.Module) -> Floors:
    param = next(model.parameters())
    return model_floors(model, measure_read_gb_s(param.device), measure_gemm_gflops(param.dtype, param.device))


class MemoryProbe:
    """The memory's read speed, sampled again and again over one buffer far larger than the caches: one timed
    sum a sample, as the profile samples it between its timed passes (`RateSampler`), so a bench's readings
    and its cost table's are the same measurement. Holds its 512 MiB until dropped."""

    def __init__(self, device: torch.device, mib: int = READ_MIB):
        self.device = device
        self.data = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
        self.data.sum()  # first touch: page faults and lazy initialisation, untimed
        _synchronize(device)

    def read(self) -> float:
        """GB/s of one sum of the buffer."""
        return self.data.numel() * 4 / _best_seconds(lambda: self.data.sum(), self.device, 1, touch=False) / 1e9


class RateSampler:
    """The read and GEMM rates sampled one at a time, between a profile's timed passes, so the floors are
    those of the moments the forwards ran in. Holds its 512 MiB read buffer and GEMM operands until dropped."""

    def __init__(self, dtype: torch.dtype, device: torch.device, mib: int = READ_MIB):
        self.device = device
        self.memory = MemoryProbe(device, mib)
        m, k, n = GEMM_SHAPE
        dtype = arithmetic_dtype(dtype, device)
        self.a = torch.randn(m, k, device=device).to(dtype)
        self.b = torch.randn(k, n, device=device).to(dtype)
        self.reads: list[float] = []  # GB/s
        self.gemms: list[float] = []  # GFLOP/s
        self.a @ self.b  # first touch, untimed
        _synchronize(device)

    def sample(self) -> None:
        """One read of the buffer and one product, each timed."""
        m, k, n = GEMM_SHAPE
        self.reads.append(self.memory.read())
        gemm = _best_seconds(lambda: self.a @ self.b, self.device, 1, touch=False)
        self.gemms.append(2 * m * k * n / gemm / 1e9)

    def floors(self, model: torch.nn.Module, statistic: str = "median") -> Floors:
        """The model's floors at the sampled rates, summarised as the forwards were (median, or "min" time:
        the best rate); measured once, best of 5, where nothing was sampled."""
        if not self.reads:
            return measure_floors(model)
        pick = max if statistic == "min" else statistics.median
        floors = model_floors(model, pick(self.reads), pick(self.gemms))
        floors.read_gb_s_best, floors.gemm_gflops_best = max(self.reads), max(self.gemms)
        floors.read_gb_s_worst = min(self.reads)
        floors.samples = len(self.reads)
        return floors


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
