"""The kernel's matrix products (`linear`, forward.c) against those of another revision's kernel, in one process.

    python scripts/products_bench.py --against 56a7c35 --ns 1,4,8,12,16 --rounds 12

Both kernels are built from source (this tree's and `git show REV:engine/models/native/forward.c`), each
pairing the weights as its own `PAIR_ROWS` says (and, on the tile path, given a copy in tiles, `tile_rows`,
where it reads one), and run SmolLM2's product shapes (the LM head, gate/up,
down) on weights far larger than the caches, so every product streams them from memory as a forward
does. Rounds shuffle the kernels' order, so neither always runs right after the other on the same
weights. Prints GB/s of weights read (median and best over the rounds) per shape, n and kernel, and first
checks that both give the same bits (the dot-product path; on an AMX CPU it is forced with
`native_use_amx(0)` unless `--amx` asks for the tile path).
"""

from __future__ import annotations

import argparse
import ctypes
import random
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from engine.models import native

SHAPES = ((49152, 576, 3), (3072, 576, 40), (576, 1536, 80))  # rows, inputs, copies: ≥ 140 MB of weights each


def sources_at(revision: str | None) -> dict[str, str]:
    """forward.c and the headers it includes, at a git revision (None: as they are in this tree)."""
    files = {}
    for path in (native.SOURCE, *native.HEADERS):
        if revision is None:
            files[path.name] = path.read_text()
            continue
        shown = subprocess.run(["git", "show", f"{revision}:engine/models/native/{path.name}"], capture_output=True,
                               text=True)
        if shown.returncode == 0:
            files[path.name] = shown.stdout
    return files


def build(files: dict[str, str], directory: Path, name: str, amx: bool) -> tuple[ctypes.CDLL, int, bool]:
    """The kernel built from forward.c and its headers (`files`, by name), the PAIR_ROWS it pairs weights by,
    and whether it takes a copy of the weights in tiles (`tile_rows`; older kernels read them only as they lie)."""
    directory = directory / name
    directory.mkdir()
    for file, text in files.items():
        (directory / file).write_text(text)
    source = files[native.SOURCE.name]
    path, out = directory / native.SOURCE.name, directory / f"{name}.so"
    subprocess.run(["gcc", *native.FLAGS, "-o", str(out), str(path), "-lm"], check=True)
    library = ctypes.CDLL(str(out))
    pointer, integer = ctypes.c_void_p, ctypes.c_int
    tiled = "lm_head_tiles" in source  # linear takes W, W in tiles, W paired (older kernels: W, W paired)
    library.linear.argtypes = [pointer, integer, integer, *[pointer] * (3 if tiled else 2), integer, pointer,
                               integer]
    library.native_use_amx(int(amx))
    return library, int(re.search(r"#define PAIR_ROWS (\d+)", source).group(1)), tiled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the git revision whose kernel to compare with")
    parser.add_argument("--ns", default="1,4,8,12,16")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--amx", action="store_true", help="time the AMX tile path (an AMX CPU only)")
    args = parser.parse_args()
    ns = [int(n) for n in args.ns.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        kernels = {"this tree": build(sources_at(None), Path(scratch), "new", args.amx),
                   args.against: build(sources_at(args.against), Path(scratch), "old", args.amx)}
        weights = {(rows, k): [torch.randn(rows, k).to(torch.bfloat16) for _ in range(copies)]
                   for rows, k, copies in SHAPES}
        pairs = {(shape, name): [native.pair_rows(w, rows_per) for w in ws]
                 for shape, ws in weights.items() for name, (_, rows_per, _) in kernels.items()}
        tiles = {shape: [native.tile_rows(w) for w in ws] for shape, ws in weights.items()} if args.amx else {}

        def run(name: str, shape: tuple[int, int], x: torch.Tensor, out: torch.Tensor, copy: int | None = None):
            library, _, tiled = kernels[name]
            for i, weight in enumerate(weights[shape]):
                if copy is None or i == copy:
                    laid = [tiles[shape][i].data_ptr() if shape in tiles else None] if tiled else []
                    library.linear(x.data_ptr(), x.shape[0], shape[1], weight.data_ptr(), *laid,
                                   pairs[(shape, name)][i].data_ptr(), shape[0], out.data_ptr(), args.threads)

        for shape in weights:  # the same bits from both, or the timing compares different work
            for n in ns:
                x = torch.randn(n, shape[1]).to(torch.bfloat16)
                outs = [torch.empty(n, shape[0], dtype=torch.bfloat16) for _ in kernels]
                for name, out in zip(kernels, outs):
                    run(name, shape, x, out, copy=0)
                assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), (shape, n)
        rates = {(name, shape, n): [] for name in kernels for shape in weights for n in ns}
        for _ in range(args.rounds):
            for shape in weights:
                for n in ns:
                    x = torch.randn(n, shape[1]).to(torch.bfloat16)
                    out = torch.empty(n, shape[0], dtype=torch.bfloat16)
                    for name in random.sample(list(kernels), len(kernels)):
                        start = time.perf_counter()
                        run(name, shape, x, out)
                        seconds = time.perf_counter() - start
                        rates[(name, shape, n)].append(sum(w.numel() * 2 for w in weights[shape]) / seconds / 1e9)
    print(f"{args.threads} thread(s), {args.rounds} rounds, load average {open('/proc/loadavg').read().split()[0]}; "
          "GB/s of weights read, median (best)")
    for shape in weights:
        for n in ns:
            cells = "   ".join(f"{name} {statistics.median(rates[(name, shape, n)]):5.1f} "
                               f"({max(rates[(name, shape, n)]):5.1f})" for name in kernels)
            print(f"  {shape[0]:6d} × {shape[1]:5d}  n={n:<3d} {cells}")


if __name__ == "__main__":
    main()
