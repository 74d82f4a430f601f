"""Hugging Face's forward against the lean one (engine/models/fastlm.py) and its native kernel, interleaved in one process.

    python scripts/forward_bench.py --dtype bfloat16 --ns 1,16,64 --context 300 --rounds 12 --threads 1
    python scripts/forward_bench.py --ns 16,64 --context 512 --against HEAD   # this tree's kernel against HEAD's

The LMs wrap one loaded model, hold the same random context, and run an N-token binary tree
(N = 1: one token) in turn, round after round, so a burst of load from elsewhere lands on all.
Each forward is cropped back to the context. Also timed in the same rounds: a plain read of every
weight the forward multiplies by (`sum`), and the forward's matrix-vector products alone, so a
one-token forward can be read against the bandwidth bound. Prints wall median and min, and
process-CPU min (ms); then, where the native kernel runs (bf16), where its time goes per N: the
stage timings it adds up itself (products, attention, output head, the rest), min over the rounds.
With `--against REV` the kernel of that git revision (`git show REV:engine/models/native/forward.c`,
built with the same flags) runs in the same rounds on its own FastLM of the same model, so two kernels
are compared under the same load; first it says whether both give the same logits, bit for bit, for
each N (a change meant to keep the bits must say yes).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def binary_tree(n: int, context: int):
    from engine.tree import position_ids, tree_attention_allowed

    parent = [-1] + [(i - 1) // 2 for i in range(1, n)]
    depth = [0]
    for p in parent[1:]:
        depth.append(depth[p] + 1)
    return list(range(100, 100 + n)), position_ids(depth, context), tree_attention_allowed(parent, context)


def main() -> None:
    from transformers import AutoModelForCausalLM

    from engine.models.embedded import embedded_model_dir
    from engine.models.fastlm import FastLM
    from engine.models.lm import CachedLM

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--ns", default="1,16,64")
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--against", help="a git revision whose kernel runs beside this tree's")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ns = [int(n) for n in args.ns.split(",")]
    model = AutoModelForCausalLM.from_pretrained(str(embedded_model_dir()), dtype=getattr(torch, args.dtype)).eval()
    lms = {"hf": CachedLM(model), "lean": FastLM(model, kernel=False)}
    native = FastLM(model)
    if native.kernel:
        lms["native"] = native
    if args.against:
        lms[args.against] = FastLM(model)
        lms[args.against].kernel.library = revision_kernel(args.against)
    lean = lms["lean"]
    context = torch.randint(0, model.config.vocab_size, (args.context,), generator=torch.Generator().manual_seed(0))
    for lm in lms.values():
        lm.forward_chain(context.tolist())
    weights = [w for layer in lean.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)] + [lean.lm_head]
    vectors = [torch.randn(w.shape[1]).to(w.dtype) for w in weights]

    def forward(lm, n: int, logits: bool = False):
        """One forward of N new tokens on the context, cropped back; with `logits`, returning them."""
        tokens, positions, allowed = trees[n]

        def run():
            out = lm.forward_chain(tokens) if n == 1 else lm.forward_tree(tokens, positions, allowed)
            lm.crop(args.context)
            return out.logits if logits else None
        return run

    trees = {n: binary_tree(n, args.context) for n in ns}
    runs = {"read every weight (sum)": lambda: [w.sum() for w in weights],
            f"its {len(weights)} products, torch.mv": lambda: [torch.mv(w, v) for w, v in zip(weights, vectors)]}
    for n in ns:
        for name, lm in lms.items():
            runs[f"{name} N={n}"] = forward(lm, n)
    if args.against:
        for n in ns:
            same = torch.equal(*[forward(lms[name], n, logits=True)().view(torch.int16)
                                 for name in ("native", args.against)])
            print(f"  N={n}: the same logits as {args.against}'s kernel: {'yes' if same else 'no'}")
    wall = {name: [] for name in runs}
    cpu = {name: [] for name in runs}
    for round_ in range(args.rounds + 2):  # two warm-up rounds
        order = list(runs)
        if args.against and round_ % 2:  # every other round the other kernel goes first at each N
            for n in ns:
                a, b = order.index(f"native N={n}"), order.index(f"{args.against} N={n}")
                order[a], order[b] = order[b], order[a]
        for name in order:
            run = runs[name]
            start, start_cpu = time.perf_counter(), time.process_time()
            run()
            if round_ >= 2:
                wall[name].append((time.perf_counter() - start) * 1000)
                cpu[name].append((time.process_time() - start_cpu) * 1000)
    print(f"{args.dtype}, {args.threads} thread(s), context {args.context}, {args.rounds} rounds, "
          f"load average {open('/proc/loadavg').read().split()[0]}")
    for name in runs:
        print(f"  {name:32s} wall median {statistics.median(wall[name]):7.1f}  min {min(wall[name]):7.1f}   "
              f"cpu min {min(cpu[name]):7.1f} ms")
    if native.kernel:
        print_stages(native, {n: forward(native, n) for n in ns}, args.rounds)
    if args.against:
        print(f"  {args.against}'s kernel:")
        print_stages(lms[args.against], {n: forward(lms[args.against], n) for n in ns}, args.rounds)


def revision_kernel(revision: str):
    """The kernel of forward.c at a git revision, built into a temporary file and loaded as `kernel()` is."""
    import ctypes
    import subprocess
    import tempfile
    from pathlib import Path

    from engine.models import native
    from products_bench import sources_at  # this folder's: forward.c and its headers at a revision

    scratch = Path(tempfile.mkdtemp())
    for name, text in sources_at(revision).items():  # the files it includes, as they were (a header may be newer)
        (scratch / name).write_text(text)
    subprocess.run(["gcc", *native.FLAGS, "-o", str(scratch / "forward.so"), str(scratch / "forward.c"), "-lm"],
                   check=True)
    return native._checked(native._declare(ctypes.CDLL(str(scratch / "forward.so"))))


def print_stages(lm, runs: dict, rounds: int) -> None:
    """The native kernel's own stage timings for each N, the minimum over `rounds` forwards (ms)."""
    import ctypes

    stages = ("products", "attention", "output head", "the rest")
    order = (1, 2, 3, 0)  # forward.c adds up glue, products, attention, output
    print("  native kernel stages, min over the rounds (ms):")
    for n, run in runs.items():
        best = [float("inf")] * 4
        for _ in range(rounds):
            seconds = (ctypes.c_double * 4)()
            lm.kernel.timings = ctypes.cast(seconds, ctypes.c_void_p)
            run()
            best = [min(b, seconds[i] * 1000) for b, i in zip(best, order)]
        lm.kernel.timings = None
        print(f"    N={n:<4d}" + "  ".join(f"{name} {value:5.1f}" for name, value in zip(stages, best)))


if __name__ == "__main__":
    main()
