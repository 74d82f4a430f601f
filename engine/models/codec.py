"""Text <-> token ids. The engine works on ids; a codec is all it knows of text."""

from __future__ import annotations

from abc import ABC, abstractmethod


class Codec(ABC):
    eos_ids: frozenset[int]
    vocab_size: int
    name: str

    @abstractmethod
    def encode_prompt(self, prompt: str) -> list[int]:
        """The ids the model reads for a user prompt (chat template applied where there is one)."""

    @abstractmethod
    def decode(self, ids: list[int]) -> str:
        """Text of generated ids, special tokens left out."""

    @abstractmethod
    def token_text(self, token: int) -> str:
        """A single token as text, for labels."""


class HFCodec(Codec):
    """A Hugging Face tokenizer, with its chat template when it has one."""

    def __init__(self, tokenizer, name: str):
        self.tokenizer = tokenizer
        self.name = name
        self.vocab_size = len(tokenizer)
        eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
        if end_of_turn is not None:
            eos.add(end_of_turn)
        self.eos_ids = frozenset(eos)

    def encode_prompt(self, prompt: str) -> list[int]:
        if self.tokenizer.chat_template:
            encoded = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, return_dict=True)
            return list(encoded["input_ids"])
        return self.tokenizer(prompt)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def token_text(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=False)


class ByteCodec(Codec):
    """Bytes as tokens (ids 0..255) plus an end-of-turn id: for tiny in-code models."""

    def __init__(self, vocab_size: int = 260, eos_id: int = 256):
        assert vocab_size > 256 and 256 <= eos_id < vocab_size
        self.vocab_size = vocab_size
        self.eos_ids = frozenset({eos_id})
        self.name = "bytes"

    def encode_prompt(self, prompt: str) -> list[int]:
        return list(prompt.encode("utf-8"))

    def decode(self, ids: list[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def token_text(self, token: int) -> str:
        return bytes([token]).decode("latin-1") if token < 256 else f"<{token}>"
