"""The text events read each step's piece from a window of the latest ids (engine/models/codec.py TextStream):
the pieces must be what decoding every id at every step gives, for any ids and any steps, multi-byte
characters cut across steps and invalid bytes included."""

from __future__ import annotations

import random

import pytest

from engine.models.codec import ByteCodec, Codec, TextStream


def whole_text_pieces(codec: Codec, ids: list[int], cuts: list[int]) -> list[str]:
    """The pieces as the whole text gives them: decode everything, hold a trailing U+FFFD back until the end."""
    pieces, given = [], ""
    for cut in cuts:
        text = codec.decode(ids[:cut])
        text = text if cut == cuts[-1] else text.rstrip("\ufffd")
        pieces.append(text[len(given):])
        given = text
    return pieces


def streamed_pieces(codec: Codec, ids: list[int], cuts: list[int]) -> list[str]:
    stream = TextStream(codec)
    return [stream.piece(ids[:cut], final=cut == cuts[-1]) for cut in cuts]


def random_cuts(rng: random.Random, length: int) -> list[int]:
    cuts, at = [], 0
    while at < length:
        at = min(length, at + rng.randint(1, 6))  # a step emits one token or several
        cuts.append(at)
    return cuts


def test_pieces_equal_the_whole_texts_for_random_bytes_and_steps():
    rng, codec = random.Random(0), ByteCodec()
    text = "plain words, é, €, 🌊, 汉字 " * 8
    for trial in range(300):
        ids = list(text.encode())[rng.randrange(40):][:rng.randint(1, 200)]  # may start mid-character
        if trial % 3 == 0:  # invalid bytes and stray continuation bytes, at random places
            for _ in range(rng.randint(1, 6)):
                ids.insert(rng.randrange(len(ids) + 1), rng.choice([0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF]))
        if trial % 5 == 0:
            ids.append(256)  # the end of text: no bytes
        cuts = random_cuts(rng, len(ids))
        assert streamed_pieces(codec, ids, cuts) == whole_text_pieces(codec, ids, cuts), (trial, ids, cuts)


@pytest.mark.slow
def test_pieces_equal_the_whole_texts_with_smollm2s_tokenizer():
    from engine.loading import load_engine
    from engine.options import EngineOptions

    codec = load_engine(EngineOptions()).codec
    rng = random.Random(1)
    samples = ["Hello there! Here is some code:\n```python\nprint('hi')\n```\n", "Emoji 🌊🔥 and 汉字 and é.",
               "  spaces   and\ttabs\n\nnew lines "]
    for trial in range(60):
        if trial % 2:
            ids = codec.tokenizer("".join(rng.choice(samples) for _ in range(rng.randint(1, 12))))["input_ids"]
        else:  # any ids at all, byte pieces and special tokens included
            ids = [rng.randrange(codec.vocab_size) for _ in range(rng.randint(1, 120))]
        cuts = random_cuts(rng, len(ids))
        assert streamed_pieces(codec, ids, cuts) == whole_text_pieces(codec, ids, cuts), (trial, ids, cuts)
