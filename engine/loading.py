"""`load_engine(options)`: the target, its drafters, its cost table and the engine over them.

Every caller asks through `EngineOptions` (engine/options.py): the command
line, the benchmark and the tools, the web server. The cost table is resolved
here once (engine/costs.py `resolve_costs`), so cast and talon-adaptive read
the same costs, measured or assumed, wherever they run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Callable

import torch

from engine.calibration import calibrate, needs_calibration
from engine.costs import resolve_costs, table_path_for
from engine.drafters.base import Drafter
from engine.drafters.draft_lm import DraftLMDrafter
from engine.drafters.eagle_head import EagleHeadDrafter
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.memory import DEFAULT_BUDGET, MemoryBank
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.drafters.suffix import SuffixDrafter
from engine.engine import SpecEngine
from engine.errors import LoadError
from engine.models import native
from engine.models.codec import HFCodec
from engine.models.device import pick_device, pick_dtype
from engine.models.embedded import EMBEDDED_NAME, embedded_model_dir
from engine.models.fastlm import causal_lm, forward_choice
from engine.models.head import load_head, resolve_head_dir, shipped_head_dir
from engine.options import EngineOptions

# Which drafter runs when none is asked for: the first one loaded, in this order (chosen by
# measurement on held-out prompts; see the head's model card).
DEFAULT_DRAFTERS = ("hybrid", "head", "draft-lm", "suffix", "prompt-lookup")


def load_lm(name_or_path: str, device: torch.device, dtype: torch.dtype, label: str | None = None):
    """A cached LM (the lean forward where it supports the model) and its tokenizer from a hub id or a
    local folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype).to(device)
    return causal_lm(model, name=label or str(name_or_path)), tokenizer


def load_engine(options: EngineOptions | None = None) -> SpecEngine:
    """The engine over a target (by default the embedded SmolLM2) with every drafter it can offer."""
    options = options or EngineOptions()
    device = pick_device(options.device)
    dtype = pick_dtype(device, options.dtype, bf16_kernel=device.type == "cpu" and forward_choice() == "native"
                       and native.available())
    target_path = str(embedded_model_dir()) if options.target is None else options.target
    target_name = options.target or EMBEDDED_NAME
    target, tokenizer = load_lm(target_path, device, dtype, label=target_name)
    drafters: dict[str, Callable[[], Drafter]] = {"suffix": SuffixDrafter, "prompt-lookup": PromptLookupDrafter}
    draft_lm = None
    if options.draft:
        draft_lm, draft_tokenizer = load_lm(options.draft, device, dtype)
        if draft_tokenizer.get_vocab() != tokenizer.get_vocab():
            raise LoadError(f"the draft {options.draft!r} has a different tokenizer from the target {target_path!r}",
                            field="draft")
        drafters["draft-lm"] = lambda: DraftLMDrafter(draft_lm)
    head_dir = _head_dir(options.head) if options.head else (
        shipped_head_dir(EMBEDDED_NAME) if options.target is None else None)
    if head_dir:
        drafters.update(head_drafters(head_dir, target.model, dtype))
    default = options.drafter or next(name for name in DEFAULT_DRAFTERS if name in drafters)
    if default not in drafters:
        raise LoadError(f"drafter {default!r} is not available; loaded: {', '.join(drafters)}", field="drafter")
    saved = table_path_for(target)
    engine = SpecEngine(target, HFCodec(tokenizer, target_name), drafters, default, draft_lm=draft_lm,
                        costs=resolve_costs(options.cost_table, saved), memory=memory_bank(options, target_name))
    if options.cost_table is None and calibrates(options) and needs_calibration(engine):
        calibrate_and_save(engine, saved)
    return engine


def memory_bank(options: EngineOptions, target_name: str) -> MemoryBank | None:
    """The process's suffix memory as the options ask: a budget per policy (0: none), and a file to keep it in."""
    budget = DEFAULT_BUDGET if options.suffix_memory_tokens is None else options.suffix_memory_tokens
    if budget == 0:
        if options.suffix_memory is not None:
            raise LoadError("a suffix memory file needs a token budget above 0", field="suffix_memory_tokens")
        return None
    return MemoryBank(budget, target=target_name, path=options.suffix_memory)


def calibrates(options: EngineOptions) -> bool:
    """Whether a load with no recorded default measures one (engine/calibration.py): the option, else
    SPECSCOPE_CALIBRATE (0 turns it off), else yes."""
    if options.calibrate is not None:
        return options.calibrate
    return os.environ.get("SPECSCOPE_CALIBRATE", "1").strip().lower() not in ("0", "false", "no", "off")


def calibrate_and_save(engine: SpecEngine, path: Path) -> None:
    """Measures this machine's default policy, with a progress bar, and saves it with the cost table."""
    from tqdm import tqdm

    bar = tqdm(unit="run", desc="no default policy measured on this device yet: calibrating")

    def progress(done: int, total: int, policy: str) -> None:
        bar.total = total
        bar.set_postfix_str(policy)
        bar.update(done - bar.n)

    try:
        calibrate(engine, progress)
    finally:
        bar.close()
    engine.costs.save(path)
    print(f"default policy {engine.default_policy_note}; recorded in {path}", file=sys.stderr)


def head_drafters(head_dir: str | Path, target_model: torch.nn.Module, dtype: torch.dtype,
                  model_name: str | None = None) -> dict[str, Callable[[], Drafter]]:
    """Factories for the `head` and `hybrid` drafters over one loaded head (weights shared by both)."""
    embeddings = target_model.get_input_embeddings().weight.detach()  # [V, H]
    head = load_head(head_dir, embeddings, dtype).to(embeddings.device)
    if forward_choice() == "native":  # SPECSCOPE_FORWARD=lean or plain keeps the head on torch's ops too
        try:
            native.use_kernel_linears(head)  # bfloat16 on a CPU that runs the kernel; else a no-op
        except native.NativeUnavailable:
            pass  # the target's FastLM has said why, once
    name = model_name or Path(head_dir).name
    layers = target_model.config.num_hidden_layers
    return {
        "head": lambda: EagleHeadDrafter(head, name, layers),
        "hybrid": lambda: HybridDrafter(EagleHeadDrafter(head, name, layers)),
    }


def _head_dir(name: str) -> Path:
    try:
        path = resolve_head_dir(name)
    except FileNotFoundError as err:
        raise LoadError(str(err), field="head") from None
    if not (path / "config.json").exists():
        raise LoadError(f"{path} is not an EAGLE-3 head folder (no config.json)", field="head")
    return path
