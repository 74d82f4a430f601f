"""The bfloat16 CPU kernel of the lean forward (forward.c), compiled once per machine and called through ctypes.

`kernel()` gives the loaded library or raises `NativeUnavailable` saying why
(not an x86-64 Linux CPU with AVX512-BF16 or AVX2, no C compiler, a failed build).
Without AVX512-BF16 (AVX2 and FMA are enough) forward.c includes avx2.h, which
computes its shared code's AVX-512 intrinsics lane for lane in two halves.
The shared object is cached under the specscope cache, keyed by the source,
the compiler, its flags and the CPU, so it is built once (about a second) and
never twice for the same machine. It is linked against the OpenMP runtime
torch has already loaded, so its threads are torch's threads.

`NativeForward` holds the pointers of one `FastLM`'s weights and runs its
forward of up to `native_max_tokens()` (256) tokens a call: see forward.c for
what it computes and how it rounds. Where AMX is not active the products read
the weights paired (`pair_rows`); where it is, as they lie and, for more than
16 tokens, from a copy in tiles (`tile_rows`): one copy, made at load for the
path this CPU takes (on first use for the other, where a test switches to
it). `KernelLinear` puts the kernel's product under a bfloat16 `nn.Linear` (the EAGLE-3 head's
fusion of the target's features): `use_kernel_linears(module)` swaps them in
where it can. `NativeHead` runs a whole draft forward of the EAGLE-3 head in
one call (`head_step`). Every call returns 0 or a code `REFUSALS` says in words.
"""

from __future__ import annotations

import copy
import ctypes
import functools
import hashlib
import mmap
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from engine.models.device import inference
from engine.models.embedded import cache_root
from engine.models.head import int8_rows

SOURCE = Path(__file__).with_name("forward.c")
HEADERS = (Path(__file__).with_name("avx2.h"),)  # what SOURCE includes: part of the build's key
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")


class NativeUnavailable(RuntimeError):
    """The kernel cannot run on this machine; the message says why."""


def _cpu() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags, from /proc/cpuinfo."""
    model, flags = "", set()
    with open("/proc/cpuinfo") as info:
        for line in info:
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    return model, flags


def build_plan() -> tuple[str, Path]:
    """The compiler and the cached shared object's path for this source, compiler, flags and CPU; raises
    NativeUnavailable where the kernel cannot run."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise NativeUnavailable(f"the kernel is written for x86-64 Linux, not {platform.system()} {platform.machine()}")
    model, flags = _cpu()
    if "avx512_bf16" not in flags and not {"avx2", "fma", "f16c"} <= flags:
        raise NativeUnavailable("this CPU has neither AVX512-BF16 nor AVX2 with FMA")
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if compiler is None:
        raise NativeUnavailable("no C compiler (gcc) on the PATH")
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    source = b"".join(path.read_bytes() for path in (SOURCE, *HEADERS))
    key = hashlib.sha256(b"\0".join([source, version.encode(), " ".join(FLAGS).encode(), model.encode(),
                                     " ".join(sorted(flags)).encode()])).hexdigest()[:16]
    return compiler, cache_root() / "native" / f"forward-{key}.so"


@functools.cache
def team_size() -> int:
    """Threads every kernel call runs on: torch's intra-op thread count when the kernel was first used.

    Fixed once, so that a caller may run torch's own small ops between kernel calls on one thread
    (engine/models/device.py, `one_torch_thread`) and the kernel keeps its team: on two cores an OpenMP
    region per argmax or top-k costs more than the op, and far more when another process holds a core."""
    return torch.get_num_threads()


def available() -> bool:
    """Whether the kernel builds and loads here (the reason it does not is said where a model asks for it)."""
    try:
        kernel()
    except NativeUnavailable:
        return False
    return True


@functools.cache
def kernel() -> ctypes.CDLL:
    """The compiled kernel, built on first use and cached on disk."""
    compiler, path = build_plan()
    if not path.exists():
        _build(compiler, path)
    team_size()  # torch's OpenMP runtime is loaded (the kernel binds to it, not a second one); the team is fixed
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:  # a truncated or foreign file under the cache's name: build it again, once
        warnings.warn(f"the cached native kernel {path.name} does not load ({error}); building it again",
                      stacklevel=2)
        _build(compiler, path)
        try:
            library = ctypes.CDLL(str(path))
        except OSError as again:
            raise NativeUnavailable(f"the built kernel {path.name} does not load ({again})") from None
    return _checked(_declare(library))


def _build(compiler: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        built = Path(scratch) / path.name
        result = subprocess.run([compiler, *FLAGS, "-o", str(built), str(SOURCE), "-lm"],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise NativeUnavailable(f"{compiler} could not build {SOURCE.name}: {result.stderr.strip()[-500:]}")
        os.replace(built, path)  # atomic: a second process building at once finds a whole file


class Dims(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32) for name in
                ("layers", "hidden", "heads", "kv_heads", "head_dim", "inter", "vocab")] + [("eps", ctypes.c_float)]


class LayerWeights(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("qkv", "o", "gate_up", "down", "attn_norm", "mlp_norm",
                                                     "qkv_tiles", "o_tiles", "gate_up_tiles", "down_tiles",
                                                     "qkv_pairs", "o_pairs", "gate_up_pairs", "down_pairs",
                                                     "qkv_int8", "o_int8", "gate_up_int8", "down_int8")]


class Forward(ctypes.Structure):
    _fields_ = ([("dims", ctypes.POINTER(Dims))]
                + [(name, ctypes.c_int) for name in ("n", "start", "capacity", "masked_columns", "threads", "tiled")]
                + [(name, ctypes.c_void_p) for name in
                   ("positions", "cos", "sin_signed", "kv", "key_tiles", "mask", "layers", "final_norm", "lm_head",
                    "lm_head_tiles", "lm_head_pairs", "x",
                    "normed", "qkv", "heads_out", "projected", "gate_up", "mlp", "logits", "features",
                    "feature_slot", "timings")])


class Sequence(ctypes.Structure):
    """One sequence of a batched forward (forward.c's `Sequence`): its rows, cache (and the cache's key tiles),
    positions and mask."""

    _fields_ = ([(name, ctypes.c_int) for name in ("n", "start", "capacity", "masked_columns", "tiled")]
                + [(name, ctypes.c_void_p) for name in ("positions", "cos", "sin_signed", "kv", "key_tiles", "mask")])


class HeadStep(ctypes.Structure):
    _fields_ = ([("dims", ctypes.POINTER(Dims))]
                + [(name, ctypes.c_int) for name in ("n", "start", "capacity", "masked_columns", "threads",
                                                     "first_logit", "norm_before_residual")]
                + [(name, ctypes.c_void_p) for name in
                   ("positions", "cos", "sin_signed", "kv", "mask", "layer", "hidden_norm", "final_norm",
                    "lm_head", "lm_head_tiles", "lm_head_pairs", "lm_head_int8", "embeds", "state", "attn_in", "x",
                    "normed", "qkv", "heads_out", "projected", "gate_up", "mlp", "logits")])


class HeadLine(ctypes.Structure):
    """forward.c's `HeadLine`: the pairs `head_step_line` runs after a head step, each the top-1 child of the one
    before."""

    _fields_ = ([(name, ctypes.c_int) for name in ("count", "vocab_rows")]
                + [(name, ctypes.c_void_p) for name in ("embed_table", "to_target", "tokens", "x", "logits")])


def _declare(library: ctypes.CDLL) -> ctypes.CDLL:
    library.forward.argtypes = [ctypes.POINTER(Forward)]
    library.forward.restype = ctypes.c_int
    library.forward_batch.argtypes = [ctypes.POINTER(Forward), ctypes.POINTER(Sequence), ctypes.c_int]
    library.forward_batch.restype = ctypes.c_int
    library.native_sequence_struct_size.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    library.native_sequence_struct_size.restype = None
    library.head_step.argtypes = [ctypes.POINTER(HeadStep)]
    library.head_step.restype = ctypes.c_int
    library.head_step_batch.argtypes = [ctypes.POINTER(HeadStep), ctypes.POINTER(Sequence), ctypes.c_int,
                                        ctypes.c_void_p]
    library.head_step_batch.restype = ctypes.c_int
    library.native_head_struct_size.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    library.native_head_struct_size.restype = None
    library.head_step_line.argtypes = [ctypes.POINTER(HeadStep), ctypes.POINTER(HeadLine)]
    library.head_step_line.restype = ctypes.c_int
    library.native_line_struct_size.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    library.native_line_struct_size.restype = None
    library.top_k_lse.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                                  ctypes.c_void_p, ctypes.c_void_p]
    library.top_k_lse.restype = ctypes.c_int
    library.argmax_row.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    library.argmax_row.restype = ctypes.c_int64
    library.argmax_row_bf16.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    library.argmax_row_bf16.restype = ctypes.c_int64
    library.native_widen.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    library.native_widen.restype = None
    library.native_max_tokens.restype = ctypes.c_int
    library.native_reads_key_tiles.restype = ctypes.c_int
    library.native_reads_int8.restype = ctypes.c_int
    library.native_amx_active.restype = ctypes.c_int
    library.native_use_amx.argtypes = [ctypes.c_int]
    library.native_use_amx.restype = None
    library.native_struct_sizes.argtypes = [ctypes.POINTER(ctypes.c_int64)]
    library.native_struct_sizes.restype = None
    library.linear.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    library.linear.restype = ctypes.c_int
    return library


def _checked(library: ctypes.CDLL) -> ctypes.CDLL:
    """The library, once its structs' sizes agree with the ctypes mirrors above."""
    sizes, head, sequence, line = (ctypes.c_int64 * 3)(), ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
    library.native_struct_sizes(sizes)
    library.native_head_struct_size(ctypes.byref(head))
    library.native_sequence_struct_size(ctypes.byref(sequence))
    library.native_line_struct_size(ctypes.byref(line))
    sizes = (*sizes, head.value, sequence.value, line.value)
    mirrors = (ctypes.sizeof(Dims), ctypes.sizeof(LayerWeights), ctypes.sizeof(Forward), ctypes.sizeof(HeadStep),
               ctypes.sizeof(Sequence), ctypes.sizeof(HeadLine))
    if tuple(sizes) != mirrors:
        raise NativeUnavailable(f"forward.c's structs (Dims, LayerWeights, Forward, HeadStep, Sequence, HeadLine: "
                                f"{tuple(sizes)} bytes) "
                                f"do not match their ctypes mirrors ({mirrors} bytes)")
    return library


# What forward.c's return codes mean (its enum, in order).
REFUSALS = {1: "dimensions it cannot block", 2: "more new tokens than one call takes",
            3: "new tokens past the cache's capacity", 4: "a rotary position outside the cache",
            5: "a mask wider than the columns", 6: "no memory for its scratch",
            7: "no paired weights for the dot-product path"}


def refused(code: int, what: str) -> RuntimeError:
    return RuntimeError(f"the native {what} refused the call: {REFUSALS.get(code, f'code {code}')}")


PAIR_ROWS = 32  # forward.c's PAIR_ROWS


def pair_rows(weight: torch.Tensor, group: int = PAIR_ROWS) -> torch.Tensor:
    """W [R, K] bf16 as the dot-product path reads it: [⌈R/32⌉, K/2, 32] pairs (int32, two bf16 each),
    row r's k = 2p, 2p + 1 at [r // 32, p, r % 32], rows past R zero. (`group`: another kernel's PAIR_ROWS,
    for scripts/products_bench.py.)"""
    rows, k = weight.shape
    padded = torch.zeros(-(-rows // group) * group, k, dtype=torch.bfloat16)
    padded[:rows] = weight
    pairs = padded.view(torch.int32)  # [R', K/2]: a pair of bf16 per int32, in memory order
    return pairs.view(-1, group, k // 2).transpose(1, 2).contiguous()


def int8_layout(weight: torch.Tensor, group: int = PAIR_ROWS) -> torch.Tensor | None:
    """W [R, K] whose rows are int8 × 2^e (engine/models/head.py, `int8_rows`) as forward.c's matmul_int8 reads
    it, one byte buffer: the ⌈R/32⌉·32 rows' scales 2^e (float32; 1 past R), then [⌈R/32⌉, K/2, 2, 32] int8,
    pair p of a 32-row group its rows' even elements (k = 2p) then their odd ones, rows past R zero. None where
    a row is not of that form: the head's bf16 pairs are read instead.

    >>> w = torch.tensor([[1.0, 2.0, 3.0, 4.0], [0.5, 0.25, -0.5, 0.0]], dtype=torch.bfloat16)
    >>> bytes_ = int8_layout(w)
    >>> bytes_[:32 * 4].view(torch.float32)[:3].tolist()  # scales 2^e: 4 = 64 · 2^-4, 0.5 = 64 · 2^-7; padding 1
    [0.0625, 0.0078125, 1.0]
    >>> pairs = bytes_[32 * 4:].view(torch.int8).view(2, 2, 32)  # [K/2 pairs][even, odd][32 rows]
    >>> pairs[1, 0, :2].tolist(), pairs[1, 1, :2].tolist()  # pair 1: k = 2 (3 = 48 · 2^-4, −0.5), k = 3
    ([48, -64], [64, 0])
    >>> int8_layout(torch.tensor([[0.3, 1.0]], dtype=torch.bfloat16)) is None
    True
    """
    found = int8_rows(weight)
    if found is None:
        return None
    q, scale = found
    rows, k = q.shape
    padded = -(-rows // group) * group
    q_padded = torch.zeros(padded, k, dtype=torch.int8)
    q_padded[:rows] = q
    scales = torch.ones(padded, dtype=torch.float32)
    scales[:rows] = scale
    blocks = q_padded.view(-1, group, k // 2, 2).permute(0, 2, 3, 1).contiguous()  # [R'/32, K/2, 2, 32]
    return torch.cat([scales.view(torch.uint8), blocks.view(torch.uint8).reshape(-1)])


HUGE_PAGE = 2 << 20  # bytes: x86's large page


def on_huge_pages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors copied into one arena that Linux is asked to back with 2 MB pages (`MADV_HUGEPAGE`, which
    transparent huge pages honour in their default `madvise` mode), each at a 4 KB boundary; the tensors as they
    are where the OS offers no such advice. A forward streams every weight from memory, and in 4 KB pages each
    4 KB costs a TLB walk and ends the hardware prefetcher's stream: on a Zen 3 (throwaway A/B, one process,
    40 interleaved rounds, the same bits) a forward of 1–4 tokens 1–3 % faster. Under 1 MB in all, the tensors
    stay as they are (a huge page would be mostly empty). The copies keep the arena alive.

    >>> a, b = on_huge_pages([torch.arange(3), torch.ones(512, 512)])
    >>> a.tolist(), b.sum().item(), (b.data_ptr() - a.data_ptr()) % 4096
    ([0, 1, 2], 262144.0, 0)
    >>> small = torch.ones(4); on_huge_pages([small])[0] is small
    True
    """
    advise = getattr(mmap, "MADV_HUGEPAGE", None)
    sizes = [-(-t.numel() * t.element_size() // 4096) * 4096 for t in tensors]
    if advise is None or sum(sizes) < HUGE_PAGE // 2:
        return tensors
    arena = mmap.mmap(-1, sum(sizes) + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    arena.madvise(advise)  # before the first touch: the pages are huge from the start (no khugepaged pass)
    whole = torch.frombuffer(arena, dtype=torch.uint8)  # holds the arena while any view of it lives
    offset = -whole.data_ptr() % HUGE_PAGE  # the large pages are the aligned 2 MB runs
    copies = []
    for tensor, size in zip(tensors, sizes):
        nbytes = tensor.numel() * tensor.element_size()
        copy_ = whole[offset:offset + nbytes].view(tensor.dtype).view(tensor.shape)
        copies.append(copy_.copy_(tensor))
        offset += size
    return copies


TILED_INPUTS = 1024  # products of at most this many inputs get a copy in tiles (see `tiles_pay`)


def tiles_pay(weight: torch.Tensor) -> bool:
    """Whether the AMX path is given this weight in tiles too: 16-row groups, rows of at most TILED_INPUTS
    inputs. Longer rows stream well as they lie (`scripts/products_bench.py --amx`, Xeon: the 1 536-input
    down product ran as fast from tiles or a little slower, the 576-input ones 8–13 % faster at 32–64
    tokens)."""
    return weight.shape[0] % 16 == 0 and weight.shape[1] <= TILED_INPUTS


def tile_rows(weight: torch.Tensor) -> torch.Tensor:
    """W [R, K] bf16 (R a multiple of 16, K of 32) as the AMX path reads it from 6 tokens on (forward.c's
    TWO_GROUPS_FROM): [R/16, K/32, 16, 32], each 16 × 32 tile of W one 1 KB block, a group's tiles in the
    order matmul_amx reads them.

    >>> w = torch.arange(32 * 64, dtype=torch.float32).view(32, 64).to(torch.bfloat16)
    >>> tiles = tile_rows(w)
    >>> tiles.shape, bool(tiles[1, 1, 2, 3] == w[16 + 2, 32 + 3])
    (torch.Size([2, 2, 16, 32]), True)
    """
    rows, k = weight.shape
    assert rows % 16 == 0 and k % 32 == 0, "AMX tiles take 16 rows of 32 inputs"
    return weight.detach().reshape(rows // 16, 16, k // 32, 32).transpose(1, 2).contiguous()


def unsupported_shape(config) -> str | None:
    """Why the kernel's blocking cannot take these dimensions, or None."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if config.hidden_size % 32 or config.intermediate_size % 32 or head_dim % 32 or head_dim > 256:
        return "hidden, intermediate and head sizes must be multiples of 32 (head size at most 256)"
    if config.vocab_size % 4 or (config.num_attention_heads + 2 * config.num_key_value_heads) * head_dim % 4:
        return "output sizes must be multiples of 4"
    return None


def as_kernel_input(tensor: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """`tensor` as the kernel reads it: of `dtype` and contiguous. Returned as it is where it already is (the
    usual case: positions made int64, a cached mask), since a no-op `.to()` still costs a dispatch, and after a
    target forward has swept the caches a dispatch costs several microseconds."""
    if tensor is None or (tensor.dtype is dtype and tensor.is_contiguous()):
        return tensor
    return tensor.to(dtype).contiguous()


@functools.lru_cache(maxsize=64)
def causal_mask(n: int) -> torch.Tensor:
    """[n, n] uint8, row i seeing columns 0 … i: the kernel's mask for n new tokens that see one another
    causally (a chain's verify, the head's context pairs), made once per n. Shared: never written.

    >>> causal_mask(3).tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    return torch.ones(n, n, dtype=torch.uint8).tril()


def _address(tensor: torch.Tensor | None) -> int | None:
    if tensor is None:
        return None
    assert tensor.is_contiguous(), "the kernel reads contiguous tensors"
    return tensor.data_ptr()


class NativeForward:
    """The kernel bound to one FastLM's weights (which must stay alive and in place)."""

    def __init__(self, lm) -> None:
        self.library = kernel()
        config = lm.config
        self.dims = Dims(len(lm.layers), config.hidden_size, lm.heads, lm.kv_heads, lm.head_dim,
                         config.intermediate_size, lm.lm_head.shape[0], lm.eps)
        self.layers = (LayerWeights * len(lm.layers))(*[
            LayerWeights(*(_address(w) for w in (l.qkv, l.o, l.gate_up, l.down, l.attn_norm, l.mlp_norm)))
            for l in lm.layers])
        self.lm = lm
        self.max_tokens = self.library.native_max_tokens()
        self.reads_key_tiles = bool(self.library.native_reads_key_tiles())  # a cache's keys in tiles (Sequence)
        self.pairs: list[torch.Tensor] | None = None  # the weights paired, for the dot-product path
        self.tiles: list[torch.Tensor] | None = None  # the weights in tiles, for the AMX path's wide products
        self.lm_head_tiles = None
        # AMX tiles take 16 output rows at a time: an output head of another size is paired on that path too
        self.lm_head_pairs = pair_rows(lm.lm_head) if lm.lm_head.shape[0] % 16 else None
        self.timings = None  # a ctypes double[4] to add each stage's seconds into (glue, products, attention, output)
        self._feature_slots: dict[tuple[int, ...], torch.Tensor] = {}  # layers asked for -> [layers + 1] int32
        self._buffers: dict[int, dict[str, torch.Tensor]] = {}  # scratch per number of tokens
        self._prepared_calls: dict[tuple[int, tuple[int, ...]], Forward] = {}  # per (tokens, feature layers)
        self._lay_out_weights()  # for the path this CPU takes: now, not in the first forward

    def _lay_out_weights(self) -> None:
        """The copy of the weights the path active now reads, made where it is missing: in tiles for AMX's
        wide products (where they pay), paired for the dot products; on huge pages where the OS allows."""
        lm = self.lm
        if self.library.native_amx_active():
            if self.tiles is None:
                output = tile_rows(lm.lm_head) if tiles_pay(lm.lm_head) else None
                self.tiles, self.lm_head_tiles = self._copies("tiles", tile_rows, tiles_pay, output)
                self._prepared_calls.clear()  # they point at the output head's copies as they were
        elif self.pairs is None:
            output = self.lm_head_pairs if self.lm_head_pairs is not None else pair_rows(lm.lm_head)
            self.pairs, self.lm_head_pairs = self._copies("pairs", pair_rows, lambda weight: True, output)
            self._prepared_calls.clear()

    def _copies(self, kind: str, lay_out, wanted, output: torch.Tensor | None
                ) -> tuple[list[torch.Tensor], torch.Tensor | None]:
        """Every layer's product weights that `wanted` picks, laid out by `lay_out`, their addresses in the
        LayerWeights fields named `{product}_{kind}`, and the output head's copy `output` (or None), all moved
        to one arena of huge pages (`on_huge_pages`): the copies, which must stay alive, and the output head's."""
        copies, fields = [], []
        for layer, weights in zip(self.lm.layers, self.layers):
            for name in ("qkv", "o", "gate_up", "down"):
                weight = getattr(layer, name)
                if wanted(weight):
                    copies.append(lay_out(weight))
                    fields.append((weights, f"{name}_{kind}"))
        copies = on_huge_pages(copies + ([output] if output is not None else []))
        for (weights, field), copy_ in zip(fields, copies):
            setattr(weights, field, copy_.data_ptr())
        return copies[:len(fields)], copies[len(fields)] if output is not None else None

    def __call__(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None, start: int,
                 feature_layers: list[int], cache=None, logits: bool = True
                 ) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """Logits [N, V] (bf16; None without `logits`: the kernel skips the output head) and the residual
        stream at `feature_layers` ([N, H] each) for x [N, H] at rotary `positions` [N], the new keys and
        values written from cache slot `start` on; `mask` [N, M] bool or uint8 over the last M columns (None:
        every column visible). x, contiguous, is the residual stream the kernel updates in place: pass a tensor
        of its own (FastLM's gathered embeddings are). `cache`: the FastLM session whose KV cache and rotary
        tables the call reads and writes (None: the one the weights were bound from)."""
        lm = cache or self.lm
        mask, positions = as_kernel_input(mask, torch.uint8), as_kernel_input(positions, torch.int64)
        call, logits, features, _buffers = self._call(x, feature_layers, logits)  # buffers alive until the call returns
        call.n, call.start, call.capacity = x.shape[0], start, lm.capacity
        call.masked_columns = 0 if mask is None else mask.shape[1]
        call.positions, call.cos, call.sin_signed = _address(positions), _address(lm.cos), _address(lm.sin_signed)
        call.kv, call.mask = _address(lm.kv), _address(mask)
        call.key_tiles, call.tiled = _address(lm.key_tiles), lm.tiled
        code = self.library.forward(ctypes.byref(call))
        if code:
            raise refused(code, "forward")
        return logits, self._features(features, feature_layers, [(0, x.shape[0])])[0]

    def batch(self, x: torch.Tensor, sequences: list[tuple], feature_layers: list[int]
              ) -> tuple[torch.Tensor, list[list[torch.Tensor]]]:
        """One call over several sessions' new tokens: x [ΣN, H] their rows in order, `sequences` one
        (FastLM session, positions [N], mask [N, M] or None, start) each, as `__call__` takes them for one.
        Logits [ΣN, V] (bf16), and per sequence its features at `feature_layers`; each sequence gets the
        bits a call of its own gives it. At most `max_tokens` rows in all."""
        kept = []  # the tensors the C structs point into, alive until the call returns
        seqs = (Sequence * len(sequences))()
        spans, row = [], 0
        for slot, (lm, positions, mask, start) in zip(seqs, sequences):
            mask, positions = as_kernel_input(mask, torch.uint8), as_kernel_input(positions, torch.int64)
            kept += [positions, mask]
            n = positions.shape[0]
            slot.n, slot.start, slot.capacity = n, start, lm.capacity
            slot.masked_columns = 0 if mask is None else mask.shape[1]
            slot.positions, slot.cos, slot.sin_signed = _address(positions), _address(lm.cos), _address(lm.sin_signed)
            slot.kv, slot.mask = _address(lm.kv), _address(mask)
            slot.key_tiles, slot.tiled = _address(lm.key_tiles), lm.tiled
            spans.append((row, row + n))
            row += n
        assert row == x.shape[0], (row, x.shape)
        call, logits, features, _buffers = self._call(x, feature_layers)
        call.n = x.shape[0]
        code = self.library.forward_batch(ctypes.byref(call), seqs, len(sequences))
        if code:
            raise refused(code, "forward")
        return logits, self._features(features, feature_layers, spans)

    def _call(self, x: torch.Tensor, feature_layers: list[int], want_logits: bool = True
              ) -> tuple[Forward, torch.Tensor | None, torch.Tensor | None, dict]:
        """The Forward of x's rows, its weights, scratch, logits (None, and no output head, without
        `want_logits`) and features filled (and the scratch, which the caller keeps alive through the call);
        the sequence's (or the batch's) fields are the caller's."""
        n, dims = x.shape[0], self.dims
        slots = tuple(sorted(set(feature_layers)))
        logits = torch.empty(n, dims.vocab, dtype=torch.bfloat16) if want_logits else None
        features = torch.empty(len(slots), n, dims.hidden, dtype=torch.bfloat16) if slots else None
        self._lay_out_weights()
        call, scratch = self._prepared(n, slots)
        call.x, call.logits, call.features = _address(x), _address(logits), _address(features)
        call.threads, call.timings = team_size(), self.timings
        return call, logits, features, scratch

    def _prepared(self, n: int, slots: tuple[int, ...]) -> tuple[Forward, dict[str, torch.Tensor]]:
        """The Forward of n tokens saving the residual stream at `slots`, with what does not change from call to
        call filled in (dimensions, weights, scratch), made once per size: after a target forward has swept
        the caches, thirty fields set from Python cost tens of microseconds a step (NativeHead does the same).
        Calls take turns (the engine's lock), so one struct serves them all; and its scratch."""
        scratch = self._scratch(n)
        call = self._prepared_calls.get((n, slots))
        if call is None:
            lm, feature_slot = self.lm, self._feature_slot(slots)
            call = Forward(dims=ctypes.pointer(self.dims), layers=ctypes.addressof(self.layers),
                           final_norm=_address(lm.norm), lm_head=_address(lm.lm_head),
                           lm_head_tiles=_address(self.lm_head_tiles), lm_head_pairs=_address(self.lm_head_pairs),
                           feature_slot=_address(feature_slot),
                           **{k: _address(scratch[k]) for k in ("normed", "qkv", "heads_out", "projected", "gate_up",
                                                                "mlp")})
            self._prepared_calls[(n, slots)] = call
        return call, scratch

    @staticmethod
    def _features(features: torch.Tensor | None, feature_layers: list[int], spans: list[tuple[int, int]]
                  ) -> list[list[torch.Tensor]]:
        """Per span of rows, the residual stream at each of `feature_layers` ([rows, H] each)."""
        if features is None:
            return [[] for _ in spans]
        slots = sorted(set(feature_layers))
        return [[features[slots.index(layer), a:b] for layer in feature_layers] for a, b in spans]

    def _feature_slot(self, slots: tuple[int, ...]) -> torch.Tensor:
        """[layers + 1] int32: where each layer's residual stream goes among the features, -1 nowhere; made
        once per set of layers (a run asks for the same three every forward)."""
        if slots not in self._feature_slots:
            feature_slot = [-1] * (self.dims.layers + 1)
            for index, layer in enumerate(slots):
                feature_slot[layer] = index
            self._feature_slots[slots] = torch.tensor(feature_slot, dtype=torch.int32)
        return self._feature_slots[slots]

    def _scratch(self, n: int) -> dict[str, torch.Tensor]:
        """The forward's scratch for n tokens, made once per n (the kernel writes each before reading it):
        a verify of the same tree size as before allocates nothing."""
        if n not in self._buffers:
            dims, new = self.dims, functools.partial(torch.empty, dtype=torch.bfloat16)
            hidden, inter, width = dims.hidden, dims.inter, (dims.heads + 2 * dims.kv_heads) * dims.head_dim
            if len(self._buffers) > 16:  # trees and prompts of many sizes: keep the memory bounded
                self._buffers.clear()
                self._prepared_calls.clear()  # each points into its size's scratch
            self._buffers[n] = {"normed": new(n, hidden), "qkv": new(n, width),
                                "heads_out": new(n, dims.heads * dims.head_dim), "projected": new(n, hidden),
                                "gate_up": new(n, 2 * inter), "mlp": new(n, inter)}
        return self._buffers[n]


class KernelLinear(nn.Module):
    """A bias-free bfloat16 linear whose product runs in the kernel (same weight Parameter, same
    state dict); any other input (a float dtype, autograd) takes F.linear."""

    def __init__(self, source: nn.Linear):
        super().__init__()
        self.weight = source.weight  # [R, K], shared
        self.in_features, self.out_features = source.in_features, source.out_features
        self.library = kernel()
        self._laid: tuple[tuple, torch.Tensor] | None = None  # ((the weight's version, tiled), its copy)

    def _laid_out(self) -> tuple[int | None, int | None]:
        """The addresses of the weight in tiles and paired, None where the path active now reads none: AMX
        reads the weight as it lies, and tiles where they pay, the dot products pairs. Made again whenever the
        weight has changed in place since."""
        amx = bool(self.library.native_amx_active()) and self.out_features % 16 == 0
        if amx and not tiles_pay(self.weight):
            return None, None
        key = (self.weight._version, amx)
        if self._laid is None or self._laid[0] != key:
            weight = self.weight.detach()
            self._laid = (key, *on_huge_pages([tile_rows(weight) if amx else pair_rows(weight)]))
        address = self._laid[1].data_ptr()
        return (address, None) if amx else (None, address)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        if x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16 or torch.is_grad_enabled():
            return F.linear(x, weight)
        flat = x.dim() == 2  # the head's fusion: rows already, so no reshape and view (two ops a draft step)
        rows = as_kernel_input(x if flat else x.reshape(-1, self.in_features), torch.bfloat16)  # [N, K]
        if rows.shape[0] == 0:
            return x.new_empty(*x.shape[:-1], self.out_features)
        out = torch.empty(rows.shape[0], self.out_features, dtype=torch.bfloat16)  # [N, R]
        code = self.library.linear(rows.data_ptr(), rows.shape[0], self.in_features, weight.data_ptr(),
                                   *self._laid_out(), self.out_features, out.data_ptr(), team_size())
        if code:
            raise refused(code, "linear")
        return out if flat else out.view(*x.shape[:-1], self.out_features)


def use_kernel_linears(module: nn.Module) -> int:
    """Swaps every bias-free bfloat16 CPU `nn.Linear` under `module` whose sizes the kernel blocks
    (in: a multiple of 32, out: of 16) for a KernelLinear; returns how many. Raises NativeUnavailable
    where the kernel cannot run."""
    kernel()
    swapped = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if (type(child) is nn.Linear and child.bias is None and child.weight.dtype == torch.bfloat16
                    and child.weight.device.type == "cpu" and child.weight.is_contiguous()
                    and child.in_features % 32 == 0 and child.out_features % 16 == 0):
                setattr(parent, name, KernelLinear(child))
                swapped += 1
    return swapped


@inference
def rope_tables(rotary: nn.Module, length: int, dtype: torch.dtype, head_dim: int,
                device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin_signed [length, d] in `dtype` from a model's own rotary module (the same values), sin's
    first half negated as rotate_half would: the tables the kernel's RoPE reads, and torch's lean one."""
    positions = torch.arange(length, device=device)[None]  # [1, T]
    cos, sin = rotary(torch.empty(0, dtype=dtype, device=device), positions)  # [1, T, d]
    half = head_dim // 2
    return cos[0].contiguous(), torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)


class NativeHead:
    """The kernel's `head_step` bound to an EAGLE-3 head (engine/models/head.py) in bfloat16 on this CPU: one C
    call per draft forward in place of some sixty torch ops. q/k/v and gate/up run fused, from copies made
    here and made again whenever a weight changes in place (a head being trained, then drafted with). A product
    whose rows are int8 × 2^e (the shipped head's) also gets an int8 copy where the kernel reads one (AVX2)."""

    def __init__(self, head, int8: bool = True) -> None:
        self.library = kernel()
        self.int8 = int8  # rows of int8 × 2^e read as int8 where the kernel does (False: as bf16, the same values)
        layer, attn = head.midlayer, head.midlayer.self_attn
        self.head = head
        if head.fc.weight.dtype != torch.bfloat16 or head.fc.weight.device.type != "cpu":
            raise NativeUnavailable("the head's step runs bfloat16 on a CPU")
        hidden, inter = head.fc.weight.shape[0], layer.mlp.gate_proj.weight.shape[0]
        if hidden % 32 or inter % 32 or attn.head_dim % 32 or attn.head_dim > 256 or head.draft_vocab_size % 4:
            raise NativeUnavailable("the head's sizes must be multiples of 32 (its draft vocabulary of 4)")
        self.dims = Dims(1, hidden, attn.heads, attn.kv_heads, attn.head_dim, inter, head.draft_vocab_size,
                         layer.input_layernorm.variance_epsilon)
        self._sources = [attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj,
                         layer.mlp.down_proj, head.lm_head]
        self._version = None
        self._tables: tuple[int, torch.Tensor, torch.Tensor] | None = None  # (capacity, cos, sin_signed)
        self._buffers: dict[int, list[torch.Tensor]] = {}  # scratch per number of pairs
        self._prepared_calls: dict[int, HeadStep] = {}  # per number of pairs, for the binding as it is (_bind)
        self._tables_of_line: tuple[torch.Tensor, torch.Tensor | None] | None = None  # see `_line_tables`
        self.max_tokens = self.library.native_max_tokens()

    def _bind(self) -> None:
        """Fused copies of the weights (paired too where the dot-product path runs), as they are now."""
        head, layer = self.head, self.head.midlayer
        q, k, v, o, gate, up, down, lm_head = (s.weight.detach() for s in self._sources)
        self.weights = {"qkv": torch.cat([q, k, v]), "o": o.contiguous(), "gate_up": torch.cat([gate, up]),
                        "down": down.contiguous(), "lm_head": lm_head.contiguous()}
        norms = (layer.input_layernorm, layer.hidden_norm, layer.post_attention_layernorm, head.norm)
        self.norms = [n.weight.detach().contiguous() for n in norms]
        amx = self.library.native_amx_active()
        int8 = {}
        if self.int8 and self.library.native_reads_int8():
            int8 = {name: int8_layout(w) for name, w in self.weights.items()}
            int8 = {name: layout for name, layout in int8.items() if layout is not None}
        tiles = {name: tile_rows(w) for name, w in self.weights.items() if amx and tiles_pay(w)}
        pairs = {name: pair_rows(w) for name, w in self.weights.items() if not amx or w.shape[0] % 16}
        # every copy the kernel reads in one arena of huge pages: after each verify they come from memory again
        copies = [self.weights, tiles, pairs, int8]
        moved = iter(on_huge_pages([t for c in copies for t in c.values()]))
        self.weights, tiles, pairs, int8 = ({name: next(moved) for name in c} for c in copies)
        self.tiles, self.pairs, self.int8_weights = tiles, pairs, int8
        w, products = self.weights, ("qkv", "o", "gate_up", "down")
        self.layer = LayerWeights(*(_address(t) for t in (w["qkv"], w["o"], w["gate_up"], w["down"], self.norms[0],
                                                          self.norms[2])),
                                  *(_address(tiles.get(name)) for name in products),
                                  *(_address(pairs.get(name)) for name in products),
                                  *(_address(int8.get(name)) for name in products))
        self._version = self._versions()
        # Every prepared call points into the old binding, and a version can come back (int8 or AMX turned off
        # and on again): none is kept.
        self._prepared_calls = {}

    def _versions(self) -> tuple:
        return tuple(s.weight._version for s in self._sources) + (self.library.native_amx_active(), self.int8)

    def _bound(self) -> None:
        """The copies of the weights as they are now (made again where a weight changed since)."""
        if self._version != self._versions():
            self._bind()

    def session(self) -> "NativeHead":
        """The same head for another request's drafts: the copies of its weights shared (the kernel only reads
        them; a request's first step no longer copies them again), scratch of its own."""
        self._bound()
        other = copy.copy(self)
        other._buffers, other._prepared_calls = {}, {}
        return other

    def _rope(self, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin_signed [capacity, d] from the head's own rotary module, as FastLM makes the target's."""
        if self._tables is None or self._tables[0] < capacity:
            self._tables = (capacity, *rope_tables(self.head.rotary, capacity, torch.bfloat16, self.dims.head_dim))
        return self._tables[1], self._tables[2]

    def __call__(self, embeds: torch.Tensor, state: torch.Tensor, positions: torch.Tensor, kv: torch.Tensor,
                 start: int, mask: torch.Tensor | None, first_logit: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Output states [N, H] and draft logits [N − first_logit, Vd] (bf16, both tensors of their own: the
        drafter keeps them row by row) for N pairs (embeds, state [N, H]) at rotary `positions` [N]; their keys
        and values go into `kv` [2, kv, C, d] from slot `start`; `mask` [N, M] bool or uint8 over the last M of the
        start + N columns (None: all visible, one pair only where N exceeds a call).

        More pairs than one call takes (a long prompt's context, read at the first step) run in calls of
        `max_tokens`: rows [a, b) from slot start + a, each seeing the columns before it and, of the new ones,
        those up to b (no row sees a later one: the context is causal, a tree lists parents first), so each row
        gets the bits of one call."""
        n = embeds.shape[0]
        if n <= self.max_tokens:
            return self._step(embeds, state, positions, kv, start, mask, first_logit)
        assert mask is not None, "pairs that see later pairs cannot be split into calls"
        outs, logits = [], []
        for a in range(0, n, self.max_tokens):
            b = min(n, a + self.max_tokens)
            wanted = max(first_logit - a, 0)  # the call's first row whose logits are asked for; b − a: none
            first = min(wanted, b - a - 1)  # a call scores at least its last row
            out, part = self._step(embeds[a:b], state[a:b], positions[a:b], kv, start + a,
                                   kernel_rows(mask, n, a, b), first)
            outs.append(out)
            logits.append(part[wanted - first:])  # without a row scored that nobody asked for
        return torch.cat(outs), torch.cat(logits)

    def _step(self, embeds: torch.Tensor, state: torch.Tensor, positions: torch.Tensor, kv: torch.Tensor,
              start: int, mask: torch.Tensor | None, first_logit: int, line: HeadLine | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """One call of the kernel's head step (`__call__`'s arguments), at most `max_tokens` pairs; with `line`,
        the line after it in the same call (`step_line`)."""
        n, capacity = embeds.shape[0], kv.shape[2]
        cos, sin_signed = self._rope(capacity)
        mask, positions = as_kernel_input(mask, torch.uint8), as_kernel_input(positions, torch.int64)
        call, out, logits, _kept = self._call(embeds, state, n - first_logit)
        call.start, call.capacity, call.masked_columns = start, capacity, 0 if mask is None else mask.shape[1]
        call.first_logit = first_logit
        call.positions, call.cos, call.sin_signed = _address(positions), _address(cos), _address(sin_signed)
        call.kv, call.mask = _address(kv), _address(mask)
        code = (self.library.head_step(ctypes.byref(call)) if line is None
                else self.library.head_step_line(ctypes.byref(call), ctypes.byref(line)))
        if code:
            raise refused(code, "head step")
        return out, logits

    def step_line(self, embeds: torch.Tensor, state: torch.Tensor, positions: torch.Tensor, kv: torch.Tensor,
                  start: int, mask: torch.Tensor | None, first_logit: int, count: int
                  ) -> tuple[torch.Tensor, torch.Tensor, "Line"]:
        """`__call__` over one call's pairs (at most `max_tokens`), then, in the same call, `count` pairs after its
        last row, each the top-1 child of the row before (forward.c's `head_step_line`: a chain's next draft
        layers, with no Python between them); the cache needs room for all. Returns the step's states and logits
        as `__call__` does, and the line."""
        assert embeds.shape[0] <= self.max_tokens and count >= 1, (embeds.shape, count)
        table, to_target = self._line_tables()
        hidden, vocab = self.dims.hidden, self.dims.vocab
        line = Line(tokens=torch.empty(count, dtype=torch.int64),
                    states=torch.empty(count, hidden, dtype=torch.bfloat16),
                    logits=torch.empty(count, vocab, dtype=torch.bfloat16))
        struct = HeadLine(count, table.shape[0], table.data_ptr(), _address(to_target), line.tokens.data_ptr(),
                          line.states.data_ptr(), line.logits.data_ptr())
        out, logits = self._step(embeds, state, positions, kv, start, mask, first_logit, struct)
        return out, logits, line

    def _line_tables(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The target's embeddings in the head's bf16 (the rows `Eagle3Head.embed` gives) and the draft vocabulary's
        target ids (int64; None where the two vocabularies are one), made once."""
        if self._tables_of_line is None:
            head = self.head
            table = head._embed if head._embed.dtype == torch.bfloat16 else head._embed.to(torch.bfloat16)
            to_target = None if head.d2t is None else head.to_target(torch.arange(head.draft_vocab_size)).long()
            self._tables_of_line = (table.contiguous(), None if to_target is None else to_target.contiguous())
        return self._tables_of_line

    def batch(self, steps: list[tuple]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Several drafts' steps in one call (`head_step_batch`), each step `_step`'s arguments as a tuple
        (embeds, state, positions, kv, start, mask, first_logit), at most `max_tokens` pairs in all: the weights
        are read once for them all, and each step gets the bits of a call of its own. Returns each step's
        output states and logits, as `_step` does."""
        kept = []  # the tensors the C structs point into, alive until the call returns
        seqs = (Sequence * len(steps))()
        first_logits = torch.tensor([step[6] for step in steps], dtype=torch.int32)
        cos, sin_signed = self._rope(max(step[3].shape[2] for step in steps))  # rows enough for every cache
        for slot, (_, _, positions, kv, start, mask, _) in zip(seqs, steps):
            mask, positions = as_kernel_input(mask, torch.uint8), as_kernel_input(positions, torch.int64)
            kept += [positions, mask]
            slot.n, slot.start, slot.capacity = positions.shape[0], start, kv.shape[2]
            slot.masked_columns = 0 if mask is None else mask.shape[1]
            slot.positions, slot.cos, slot.sin_signed = _address(positions), _address(cos), _address(sin_signed)
            slot.kv, slot.mask = _address(kv), _address(mask)
        embeds = torch.cat([step[0] for step in steps])  # [ΣN, H]
        state = torch.cat([step[1] for step in steps])
        rows = [step[0].shape[0] for step in steps]
        asked = [n - step[6] for n, step in zip(rows, steps)]
        call, out, logits, _kept = self._call(embeds, state, sum(asked))
        code = self.library.head_step_batch(ctypes.byref(call), seqs, len(steps), first_logits.data_ptr())
        if code:
            raise refused(code, "head step")
        return list(zip(out.split(rows), logits.split(asked)))

    def _call(self, embeds: torch.Tensor, state: torch.Tensor, asked: int
              ) -> tuple[HeadStep, torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        """The HeadStep of N pairs with `asked` rows of logits: weights, scratch, inputs and outputs filled (the
        sequence's fields are the caller's), the outputs [N, H] and [asked, Vd] (tensors of their own: the drafter
        keeps them row by row), and the inputs made contiguous, which the caller keeps alive through the call."""
        self._bound()
        n = embeds.shape[0]
        call = self._prepared(n)
        out = torch.empty(n, self.dims.hidden, dtype=torch.bfloat16)
        # Written in place of a reused buffer: a fresh tensor costs an allocation, a reused one a copy of every row.
        logits = torch.empty(asked, self.dims.vocab, dtype=torch.bfloat16)
        embeds, state = as_kernel_input(embeds, torch.bfloat16), as_kernel_input(state, torch.bfloat16)
        call.embeds, call.state, call.x, call.logits = (embeds.data_ptr(), state.data_ptr(), out.data_ptr(),
                                                        logits.data_ptr())
        call.threads = team_size()
        return call, out, logits, [embeds, state]

    def _prepared(self, n: int) -> HeadStep:
        """The HeadStep of n pairs with what does not change from call to call filled in (dimensions, weights,
        norms, scratch), made once per size and binding of the weights: one field set per input and output a call,
        not thirty, which after a target forward has swept the caches cost tens of microseconds a draft forward."""
        scratch = self._scratch(n)
        call = self._prepared_calls.get(n)
        if call is None:
            call = HeadStep(dims=ctypes.pointer(self.dims), n=n, norm_before_residual=int(self.head.norm_before_residual),
                            layer=ctypes.addressof(self.layer), hidden_norm=_address(self.norms[1]),
                            final_norm=_address(self.norms[3]), lm_head=_address(self.weights["lm_head"]),
                            lm_head_tiles=_address(self.tiles.get("lm_head")),
                            lm_head_pairs=_address(self.pairs.get("lm_head")),
                            lm_head_int8=_address(self.int8_weights.get("lm_head")), attn_in=scratch[0].data_ptr(),
                            **{name: t.data_ptr() for name, t in zip(("normed", "qkv", "heads_out", "projected",
                                                                       "gate_up", "mlp"), scratch[1:])})
            self._prepared_calls[n] = call
        return call

    def _scratch(self, n: int) -> list[torch.Tensor]:
        """The step's scratch for n pairs (attention input, normed, qkv, heads' outputs, projected, gate/up,
        SiLU·up), made once per size."""
        if n not in self._buffers:
            dims, new = self.dims, functools.partial(torch.empty, dtype=torch.bfloat16)
            hidden, inter, width = dims.hidden, dims.inter, (dims.heads + 2 * dims.kv_heads) * dims.head_dim
            if len(self._buffers) > 64:  # trees of many sizes: keep the memory bounded
                self._buffers.clear()
                self._prepared_calls.clear()  # each points into its size's scratch
            self._buffers[n] = [new(n, 2 * hidden), new(n, hidden), new(n, width), new(n, dims.heads * dims.head_dim),
                                new(n, hidden), new(n, 2 * inter), new(n, inter)]
        return self._buffers[n]


@dataclass
class Line:
    """The pairs `NativeHead.step_line` ran after a step: each the top-1 child of the one before."""

    tokens: torch.Tensor  # [count] int64: their target ids
    states: torch.Tensor  # [count, H]: their output states
    logits: torch.Tensor  # [count, Vd]: their draft logits


def kernel_rows(masked: torch.Tensor | None, n: int, a: int, b: int) -> torch.Tensor | None:
    """The kernel's mask for rows [a, b) of n new tokens run as one call of a forward split into calls
    (FastLM's and the head's): [b - a, M'] over the last M' columns it has, None where they see every
    column. `masked` [n, M] bool or uint8 over the last M columns (None: causal, the shared `causal_mask`). No
    row sees a later one (a tree lists parents first, a chain is causal), so the columns of rows ≥ b are
    dropped."""
    if masked is None:
        return causal_mask(b - a) if b - a > 1 else None
    rows = masked[a:b, :max(0, masked.shape[1] - (n - b))]  # [b - a, M'] over the last M' columns
    return None if rows.shape[1] == 0 or bool(rows.all()) else rows


TOP_K_MAX = 64  # forward.c's TOP_K_MAX: the most values one top_k_lse call ranks per row


def top_k_lse(logits: torch.Tensor, k: int, out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The k largest of each row of bf16 logits [R, V], largest first (ties to the lower index), as values
    [R, k] float32 and indices [R, k] int64, and each row's log-sum-exp [R] float32: one C call where
    torch would take three ops and a float copy of every row. k is at most TOP_K_MAX. `out`: those three
    tensors to write into (a caller that reads them at once and keeps none: three allocations fewer a call)."""
    assert logits.dtype == torch.bfloat16 and logits.dim() == 2, (logits.dtype, logits.shape)
    logits = logits.contiguous()
    rows, vocab = logits.shape
    if out is None:
        out = (torch.empty(rows, k, dtype=torch.float32), torch.empty(rows, k, dtype=torch.int64),
               torch.empty(rows, dtype=torch.float32))
    values, indices, lse = out
    assert values.shape == indices.shape == (rows, k) and lse.shape == (rows,), "out: [R, k], [R, k] and [R]"
    assert values.dtype == lse.dtype == torch.float32 and indices.dtype == torch.int64, "out: float32, int64, float32"
    code = kernel().top_k_lse(logits.data_ptr(), rows, vocab, k, lse.data_ptr(), indices.data_ptr(), values.data_ptr())
    if code:
        raise refused(code, "top-k")
    return values, indices, lse


def widen(x: torch.Tensor) -> torch.Tensor:
    """x.float() for a bfloat16 CPU tensor, the same values (bf16 → float32 is exact) on the kernel's team
    (tests/test_native.py checks it where the kernel runs; only the native forward calls it)."""
    assert x.dtype == torch.bfloat16 and x.device.type == "cpu", (x.dtype, x.device)
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.float32)
    kernel().native_widen(x.data_ptr(), x.numel(), out.data_ptr(), team_size())
    return out


def argmax_row(logits: torch.Tensor, row: int) -> int:
    """The index of the largest value of row `row` of float32 or bfloat16 logits [R, V] on the CPU,
    contiguous: the first where several tie (a NaN first of all), as `int(logits[row].argmax())` answers,
    in one C call where torch takes ~60 µs for a row of 49 152 (11–14 µs on the AVX2 Zen 3, less with
    AVX-512). A bf16 row answers as its float32 widening would (widening is exact): a greedy walk reads
    the kernel's logits without widening them."""
    assert logits.dtype in (torch.float32, torch.bfloat16) and logits.dim() == 2 and logits.is_contiguous(), \
        (logits.dtype, logits.shape)
    assert 0 <= row < logits.shape[0], (row, logits.shape)
    if logits.dtype == torch.bfloat16:
        return kernel().argmax_row_bf16(logits.data_ptr(), row, logits.shape[1])
    return kernel().argmax_row(logits.data_ptr(), row, logits.shape[1])
