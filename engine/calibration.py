"""The default policy of a machine nobody has benchmarked yet, measured on its first load.

A request without a policy gets the engine's default: the policy `specscope
bench --record-default` measured fastest here, recorded with the cost table.
On a fresh machine there is no such record, and no fixed choice is safe: a
60-node tree wins on a GPU and loses to plain decoding on a 2-core CPU. So
`load_engine` (engine/loading.py) measures one before it serves anything:
every policy at its defaults, `ar` included, on a few short prompts, prompt by
prompt interleaved (a burst of load lands on all), greedy, through the same
engine, drafter and cost table a request would use. The fastest by total tokens
per second becomes the default if it beats `ar` by MARGIN, and `ar` otherwise,
recorded with its evidence in the cost table file, so it happens once per
device, model and dtype. Four short prompts are a noisy measure: on a 2-core
AVX2 CPU chain measured 1.00x here and 0.97x in the bench that followed, and a
near-tie is noise that plain decoding cannot lose to.

Where the engine has no measured cost table either (a fresh machine), the
calibration first measures a small one (COST_GRID: batches 1 and 4, two
contexts, n up to 64, with engine/profiling.py's timers, `specscope profile`'s
own): chain, cast and talon-adaptive size their trees from these costs.
Priced by the assumed ones (extra tokens nearly free) they drafted deep, and
in the calibration's own runs on the Zen 3 (2026-12-07) chain made 0.93× `ar`,
cast 0.67×, talon-adaptive 0.68×; with the small table 1.00×, 1.01× and 0.97×.
The small table is saved with the default; `specscope profile` measures the
full one in its place.

The prompts are our own, written for this purpose, and are no benchmark's:
a calibration must not tune on what a bench will measure. A benchmark's
`--record-default` replaces the calibration's choice with better evidence,
and `specscope profile` drops it (the costs it was measured with changed), so
the next load measures again.
"""

from __future__ import annotations

import time
from typing import Callable

from engine.costs import FASTEST, FASTEST_EVIDENCE, record_fastest
from engine.policies import POLICIES
from engine.policies.base import PolicyContext
from engine.profiling import Grid, measure_costs
from engine.request import GenerationRequest

SOURCE = "a first-load calibration"  # the evidence's `source`: what fastest_policy_note names
PROMPTS = (
    "Explain in a few sentences why the sky is blue.",
    "Write a short email asking a colleague to move our meeting to Friday.",
    "List five tips for keeping a vegetable garden healthy.",
    "What is the difference between a list and a tuple in Python?",
)
NEW_TOKENS = 48
MARGIN = 1.05  # the speedup over `ar` a policy needs to become the default: below it, a tie goes to plain decoding
# What a first load measures where nothing was (23 s on the 2-core Zen 3, timed by hand): the n a chain or a
# small tree verifies, densely, and a few wide ones; batch 4 so that a server still batches
# (SpecEngine.default_max_batch)
COST_GRID = Grid(ns=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 48, 64), contexts=(128, 512), batches=(1, 4),
                 repeats=2)

Progress = Callable[[int, int, str], None]  # (done, total, what) after each run


def needs_calibration(engine) -> bool:
    """Whether nothing recorded a default for this engine's device, model and dtype."""
    return engine.costs.meta.get(FASTEST) not in POLICIES


def calibrate(engine, progress: Progress | None = None) -> str:
    """Runs every policy on PROMPTS (NEW_TOKENS each), records the fastest in the engine's cost table as
    the default with its evidence, and returns it; first measures the table (COST_GRID) where the engine has
    none measured. The caller saves the table."""
    if not engine.costs.measured:
        measure_small_table(engine)
    names = list(POLICIES)  # ar first
    tokens = dict.fromkeys(names, 0)
    seconds = dict.fromkeys(names, 0.0)
    total, done = len(PROMPTS) * len(names), 0
    for name in names:  # warm-up: every policy's first run builds its drafter and touches its weights
        engine.run(GenerationRequest(prompt=PROMPTS[0], policy=name, max_new_tokens=8), detail=False,
                   memory=None)
    for prompt in PROMPTS:
        for name in names:
            result = engine.run(GenerationRequest(prompt=prompt, policy=name, max_new_tokens=NEW_TOKENS), detail=False,
                                memory=None)
            tokens[name] += result.new_tokens
            seconds[name] += result.wall_s
            done += 1
            if progress:
                progress(done, total, name)
    speed = {name: tokens[name] / seconds[name] for name in names if seconds[name] > 0}
    best = max(speed, key=speed.get)
    if speed[best] < MARGIN * speed["ar"]:
        best = "ar"
    record_fastest(engine.costs, best, {
        "speedup_vs_ar": {name: round(speed[name] / speed["ar"], 3) for name in speed},
        "prompts": len(PROMPTS), "source": SOURCE, "max_new_tokens": NEW_TOKENS,
        "drafter": engine.default_drafter, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    })
    return best


def measure_small_table(engine) -> None:
    """The engine's cost table measured on COST_GRID (its draft LM's, else its EAGLE-3 head's draft costs),
    in place of the assumed one."""
    head = engine.drafters["head"]() if engine.draft_lm is None and "head" in engine.drafters else None
    table = measure_costs(engine.target, engine.draft_lm, COST_GRID, head=head)
    table.meta["source"] = SOURCE
    engine.context = PolicyContext(costs=table)


def is_calibration(meta: dict) -> bool:
    """Whether a table's recorded default came from a calibration rather than a benchmark."""
    return (meta.get(FASTEST_EVIDENCE) or {}).get("source") == SOURCE
