"""Devices and dtypes: which to use, what to call them, and clocks that tell the truth on a GPU.

A GPU runs kernels asynchronously: a host clock read right after a launch
measures the launch, not the work. Every time the engine reports (draft,
verify, a drafter's forwards) is read through `synchronize`, which waits for
the device's queue where there is one and costs nothing on a CPU.
"""

from __future__ import annotations

import functools
import platform
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import torch

from engine.errors import LoadError

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def pick_device(requested: str | None = None) -> torch.device:
    """The requested device, else cuda, then mps, then cpu."""
    if requested:
        try:
            return torch.device(requested)
        except RuntimeError as err:
            raise LoadError(f"unknown device {requested!r}: {err}", field="device") from None
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def cpu_has_native_bf16() -> bool:
    """AVX-512 BF16 or AMX on x86, the BF16 extension on Arm: where bf16 matmuls beat fp32."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine() == "arm64"  # Apple silicon
    flags = set(cpuinfo.split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def pick_dtype(device: torch.device, requested: str | None = None, bf16_kernel: bool = False) -> torch.dtype:
    """The requested dtype, else bf16 on CUDA, on CPUs with native bf16 and on CPUs where specscope's own bf16
    kernel runs (`bf16_kernel`: engine/models/native, which needs only AVX2 and FMA), fp16 on other
    accelerators, else fp32. (Without the kernel torch's bf16 products on such a CPU are slower than fp32's;
    with it a bf16 forward reads half the bytes and runs at the read's rate.)"""
    if requested:
        if requested not in DTYPES:
            raise LoadError(f"unknown dtype {requested!r}; choose one of float32, bfloat16, float16", field="dtype")
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16
    if device.type == "cpu":
        return torch.bfloat16 if cpu_has_native_bf16() or bf16_kernel else torch.float32
    return torch.float16


def device_name(device: torch.device) -> str:
    """The accelerator's marketing name, or the CPU's model name and thread count (both set speed)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu} {torch.get_num_threads()}t ({device.type})"


@contextmanager
def one_torch_thread(active: bool = True) -> Iterator[None]:
    """Runs torch's own ops on one thread inside the block (when `active`), then restores the count.

    For a run whose forwards are the native kernel's (its team is fixed, engine/models/native): what is
    left to torch is small (an argmax, a top-k, a log-sum-exp over one vocabulary row), and an OpenMP
    region on two cores costs more than such an op, much more when another process holds a core."""
    if not active:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


F = TypeVar("F", bound=Callable)


def inference(fn: F) -> F:
    """`torch.inference_mode()` around `fn`, entered only where it is off. A run holds it for all its steps
    (`SpecEngine._turn`), and entering it again costs ~5 µs a call, ~40 after a target forward has swept the
    caches (docs/fastpath.md): a chain step called such functions eight times."""
    @functools.wraps(fn)
    def within(*args, **kwargs):
        if torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode():
            return fn(*args, **kwargs)
    return within  # type: ignore[return-value]


def synchronize(device: torch.device) -> None:
    """Waits for the device's queued work (a no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def clock(device: torch.device) -> float:
    """Seconds on a monotonic clock, after the device has finished what was queued."""
    synchronize(device)
    return time.perf_counter()
