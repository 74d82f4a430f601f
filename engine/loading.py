"""Loading a target, its drafters and the engine over them: by Hugging Face id, local path, or the embedded default."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Callable

import torch

from engine.codec import HFCodec
from engine.drafters.base import Drafter
from engine.drafters.draft_lm import DraftLMDrafter
from engine.drafters.eagle_head import head_drafters
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.embedded import EMBEDDED_NAME, embedded_model_dir
from engine.engine import SpecEngine
from engine.head import resolve_head_dir, shipped_head_dir
from engine.fastlm import causal_lm

DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


# Which drafter runs when none is asked for: the first one loaded, in this order (chosen by
# measurement on held-out prompts; see the head's model card).
DEFAULT_DRAFTERS = ("hybrid", "head", "draft-lm", "prompt-lookup")


class LoadError(ValueError):
    """A model or drafter that cannot be used as asked."""


def pick_device(requested: str | None = None) -> torch.device:
    if requested:
        return torch.device(requested)
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


def pick_dtype(device: torch.device, requested: str | None = None) -> torch.dtype:
    if requested:
        if requested not in DTYPES:
            raise LoadError(f"unknown dtype {requested!r}; choose one of float32, bfloat16, float16")
        return DTYPES[requested]
    if device.type == "cuda":
        return torch.bfloat16
    if device.type == "cpu" and cpu_has_native_bf16():
        return torch.bfloat16
    return torch.float32 if device.type == "cpu" else torch.float16


def load_lm(name_or_path: str, device: torch.device, dtype: torch.dtype, label: str | None = None):
    """A cached LM (the lean forward where it supports the model) and its tokenizer from a hub id or a
    local folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype).to(device)
    return causal_lm(model, name=label or str(name_or_path)), tokenizer


def load_engine(target: str | None = None, draft: str | None = None, head: str | None = None,
                drafter: str | None = None, dtype: str | None = None, device: str | None = None,
                policy_context: dict | None = None) -> SpecEngine:
    """The engine over a target (None: the embedded SmolLM2) with every drafter it can offer."""
    torch_device = pick_device(device)
    torch_dtype = pick_dtype(torch_device, dtype)
    target_path = str(embedded_model_dir()) if target is None else target
    target_lm, tokenizer = load_lm(target_path, torch_device, torch_dtype, label=target or EMBEDDED_NAME)
    drafters: dict[str, Callable[[], Drafter]] = {"prompt-lookup": PromptLookupDrafter}
    draft_lm = None
    if draft:
        draft_lm, draft_tokenizer = load_lm(draft, torch_device, torch_dtype)
        if draft_tokenizer.get_vocab() != tokenizer.get_vocab():
            raise LoadError(f"the draft {draft!r} has a different tokenizer from the target {target_path!r}")
        drafters["draft-lm"] = lambda: DraftLMDrafter(draft_lm)
    head_dir = _head_dir(head) if head else (shipped_head_dir(EMBEDDED_NAME) if target is None else None)
    if head_dir:
        if not (Path(head_dir) / "config.json").exists():
            raise LoadError(f"{head_dir} is not an EAGLE-3 head folder (no config.json)")
        drafters.update(head_drafters(head_dir, target_lm.model, torch_dtype))
    default = drafter or next(name for name in DEFAULT_DRAFTERS if name in drafters)
    if default not in drafters:
        raise LoadError(f"drafter {default!r} is not available; loaded: {', '.join(drafters)}")
    engine = SpecEngine(target_lm, HFCodec(tokenizer, target or EMBEDDED_NAME), drafters, default,
                        draft_lm=draft_lm, policy_context=policy_context)
    _attach_saved_costs(engine)
    return engine


def _head_dir(name: str) -> Path:
    try:
        return resolve_head_dir(name)
    except FileNotFoundError as err:
        raise LoadError(str(err)) from None


def _attach_saved_costs(engine: SpecEngine) -> None:
    """Cost-aware policies read the measured table when this device, model and dtype have one."""
    from engine.profile import CostTableMissing, load_cost_table

    if "cost_table" not in engine.policy_context:
        try:
            engine.policy_context["cost_table"] = load_cost_table(engine, profile_if_missing=False)
        except CostTableMissing:
            pass
