"""A token that is only part of a UTF-8 character (an emoji's first bytes) carries its raw bytes in the
events, so the page can decode it with its neighbours instead of drawing ⟨bytes⟩→⟨bytes⟩."""

from __future__ import annotations

from engine.models.codec import HFCodec, piece_bytes
from engine.events import Candidate, EmittedToken, TreeNode, parse_event

WAVE = "🌊".encode()  # f0 9f 8c 8a


class ByteLevelTokenizer:
    """Three byte-level pieces that spell " 🌊", and a whole word: what a GPT-2-style tokenizer holds."""

    pieces = ["ĠðŁ", "Į", "Ĭ", "hello"]
    raw = [b" " + WAVE[:2], WAVE[2:3], WAVE[3:4], b"hello"]
    eos_token_id = None
    chat_template = None

    def __len__(self):
        return len(self.pieces)

    def get_vocab(self):
        return {piece: i for i, piece in enumerate(self.pieces)}

    def convert_ids_to_tokens(self, token):
        return self.pieces[token]

    def decode(self, ids, skip_special_tokens=False):
        return b"".join(self.raw[i] for i in ids).decode("utf-8", errors="replace")


def test_pieces_of_a_multi_byte_character_decode_together_to_it():
    codec = HFCodec(ByteLevelTokenizer(), "byte-level")
    hexes = [codec.byte_hex(token) for token in range(4)]
    assert hexes == ["20f09f", "8c", "8a", None]  # a whole word needs no bytes
    assert b"".join(bytes.fromhex(h) for h in hexes[:3]).decode() == " 🌊"


def test_byte_fallback_pieces_are_read_as_their_byte():
    assert piece_bytes("<0xF0>") == b"\xf0"
    assert piece_bytes("▁hello") is None


def test_events_without_byte_hex_read_as_before():
    line = ('{"schema_version": 3, "run_id": "r", "policy": "ar", "type": "verify", "step": 1, "nodes": [], '
            '"accepted_path": [0], "emitted": {"parent": 0, "token": 5, "text": "a", "p": 1.0, "kind": "bonus"}}')
    assert parse_event(line).emitted.byte_hex is None
    for model in (Candidate, TreeNode, EmittedToken):
        assert model.model_fields["byte_hex"].default is None


def test_byte_hex_is_written_only_where_a_token_has_it():
    whole = EmittedToken(parent=0, token=5, text="a", p=1.0, kind="bonus")
    partial = EmittedToken(parent=0, token=6, text="\ufffd", p=1.0, kind="bonus", byte_hex="f09f")
    assert "byte_hex" not in whole.model_dump_json()
    assert parse_event_field(partial.model_dump_json()) == "f09f"


def parse_event_field(text: str) -> str:
    return EmittedToken.model_validate_json(text).byte_hex
