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

    def token_bytes(self, token: int) -> bytes | None:
        """A token's raw bytes where its text alone is not whole UTF-8 (part of a multi-byte character,
        which token_text shows as U+FFFD), so a reader can decode it with its neighbours; else None."""
        return None

    def byte_hex(self, token: int) -> str | None:
        """token_bytes as hex ("f09f"), the form the events carry."""
        raw = self.token_bytes(token)
        return raw.hex() if raw is not None else None


class HFCodec(Codec):
    """A Hugging Face tokenizer, with its chat template when it has one. A token's text and bytes are
    decoded once and kept: a live tree labels thousands of candidates a step."""

    def __init__(self, tokenizer, name: str):
        self.tokenizer = tokenizer
        self._texts: dict[int, str] = {}
        self._bytes: dict[int, bytes | None] = {}
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
        text = self._texts.get(token)
        if text is None:
            text = self._texts[token] = self.tokenizer.decode([token], skip_special_tokens=False)
        return text

    def token_bytes(self, token: int) -> bytes | None:
        if token not in self._bytes:
            whole = "\ufffd" not in self.token_text(token)
            self._bytes[token] = None if whole else piece_bytes(self.tokenizer.convert_ids_to_tokens(token))
        return self._bytes[token]


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


class TextStream:
    """The text of a growing list of generated ids, handed out a piece at a time.

    Decoding every id at every step costs O(n) a step, O(n²) a run (SmolLM2's tokenizer: 0.04 ms at 96
    tokens, 0.3 ms at 1 000). A piece is read from a window of the latest ids instead: appending ids
    changes nothing of a window's text but its end, where an incomplete character shows as U+FFFD and is
    held back until whole (or the run ends). The window moves up once it spans 2 × WINDOW ids and its text
    ends on a whole character; it keeps its last WINDOW ids, so a tokenizer that drops the leading space of
    the first id it decodes (SentencePiece's) reads the same text at the window's end either way.

    >>> ids = list("h€llo".encode())
    >>> stream = TextStream(ByteCodec())
    >>> [stream.piece(ids[:n]) for n in (1, 2, 3, 4, 7)]
    ['h', '', '', '€', 'llo']
    >>> stream.piece(ids + [0xE2], final=True)  # the run ends mid-character: what there is
    '\ufffd'
    """

    WINDOW = 16

    def __init__(self, codec: Codec, generated: list[int] = ()):
        self.codec = codec
        self._start = 0  # the window's first id
        self._shown = len(codec.decode(list(generated)).rstrip("\ufffd"))  # of the window's text, given out

    def piece(self, generated: list[int], final: bool = False) -> str:
        """The text `generated` adds to what was given out before (all of it when `final`)."""
        text = self.codec.decode(generated[self._start:])
        shown = text if final else text.rstrip("\ufffd")
        piece, self._shown = shown[self._shown:], len(shown)
        if len(generated) - self._start >= 2 * self.WINDOW and shown == text:
            self._start = len(generated) - self.WINDOW
            self._shown = len(self.codec.decode(generated[self._start:]))
        return piece


def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte: printable bytes stand for themselves, the
    rest for 256 + their rank (the mapping Hugging Face's ByteLevel pre-tokenizer uses)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(char): byte for byte, char in zip(printable, chars)}


BYTE_LEVEL = _byte_level_alphabet()


def piece_bytes(piece: str) -> bytes | None:
    """The bytes a tokenizer's piece stands for: a byte-level BPE piece ("ĠðŁ" -> b" \\xf0\\x9f") or a
    byte-fallback piece ("<0xF0>" -> b"\\xf0"); None for any other kind.

    >>> piece_bytes("ĠðŁ"), piece_bytes("<0xF0>"), piece_bytes("▁hello")
    (b' \\xf0\\x9f', b'\\xf0', None)
    """
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    if piece and all(ch in BYTE_LEVEL for ch in piece):
        return bytes(BYTE_LEVEL[ch] for ch in piece)
    return None
