"""Hugging Face's own decoding as bench columns, for scale.

`hf-generate` is plain greedy `generate`; `hf-prompt-lookup` is its prompt-lookup
decoding (n-gram guesses of up to 10 tokens). Both call the target's model
object directly, outside the engine, on the prompt ids the engine reads and the
same token budget, so the bench can say whether a policy beats what a user
gets from `transformers` alone. Their τ and δ are not observable and are left empty.
"""

from __future__ import annotations

import time

import torch

from engine.engine import SpecEngine

HF_BASELINES: dict[str, dict[str, int]] = {
    "hf-generate": {},
    "hf-prompt-lookup": {"prompt_lookup_num_tokens": 10},
}


def is_hf_baseline(name: str) -> bool:
    return name in HF_BASELINES


@torch.inference_mode()
def run_hf_baseline(engine: SpecEngine, name: str, prompt: str, max_new_tokens: int) -> tuple[list[int], float]:
    """Greedy new tokens (EOS included, as the engine emits it) and wall seconds of one `generate` call."""
    ids = engine.codec.encode_prompt(prompt)
    eos = sorted(engine.codec.eos_ids)
    model = engine.target.model
    inputs = torch.tensor([ids], device=engine.target.device)  # [1, P]
    start = time.perf_counter()
    out = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new_tokens,
                         do_sample=False, eos_token_id=eos, pad_token_id=eos[0], **HF_BASELINES[name])
    wall = time.perf_counter() - start
    return out[0, len(ids):].tolist(), wall
