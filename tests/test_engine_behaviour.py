"""Stopping, bad input, cancellation, events and traces of the engine on tiny in-code models."""

import pytest
import torch
from pydantic import ValidationError
from transformers import PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers

from conftest import random_prompts
from engine.engine import SpecEngine
from engine.errors import LoadError, RequestError
from engine.events import TraceWriter, read_trace
from engine.loading import load_engine
from engine.models.codec import ByteCodec
from engine.options import EngineOptions
from engine.policies import POLICIES
from engine.request import MIN_TEMPERATURE, GenerationRequest
from tiny_models import tiny_llama


def with_eos(engine: SpecEngine, eos: int) -> SpecEngine:
    """The same models with another token as the end of turn."""
    codec = ByteCodec()
    codec.eos_ids = frozenset({eos})
    return SpecEngine(engine.target, codec, engine.drafters, engine.default_drafter, draft_lm=engine.draft_lm)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_generation_stops_at_end_of_turn_exactly_where_plain_decoding_would(engine64, policy):
    prompt = random_prompts(1, seed=9)[0]
    reference = engine64.run(GenerationRequest(prompt=prompt, policy="ar", max_new_tokens=48), detail=False).tokens
    eos = reference[len(reference) // 2]
    expected = reference[:reference.index(eos) + 1]
    result = with_eos(engine64, eos).run(GenerationRequest(prompt=prompt, policy=policy, max_new_tokens=48),
                                         detail=False)
    assert result.tokens == expected
    assert result.stop_reason == "eos"


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("max_new_tokens", [1, 2, 7])
def test_generation_stops_at_max_new_tokens_even_mid_step(engine64, policy, max_new_tokens):
    request = GenerationRequest(prompt="abcabcabc", policy=policy, drafter="prompt-lookup",
                                max_new_tokens=max_new_tokens)
    result = engine64.run(request, detail=False)
    assert result.new_tokens == max_new_tokens
    assert result.stop_reason == "max_new_tokens"


@pytest.mark.parametrize("request_fields, field", [
    ({"prompt": "   "}, "prompt"),
    ({"prompt": "x" * 2000}, "prompt"),
    ({"prompt": "hello", "max_new_tokens": 1020}, "max_new_tokens"),
    ({"prompt": "hello", "policy": "medusa"}, "policy"),
    ({"prompt": "hello", "policy": "talon", "params": {"mu": 0}}, "params.mu"),
    ({"prompt": "hello", "policy": "talon", "params": {"mu": 1.01}}, "params.mu"),
    ({"prompt": "hello", "policy": "talon", "params": {"budget": 0}}, "params.budget"),
    ({"prompt": "hello", "policy": "eagle", "params": {"width": 3}}, "params.width"),
    ({"prompt": "hello", "drafter": "../../etc/passwd"}, "drafter"),
])
def test_bad_requests_get_a_clear_error_naming_the_field(engine64, request_fields, field):
    with pytest.raises(RequestError) as err:
        engine64.run(GenerationRequest(**request_fields))
    assert err.value.field == field


@pytest.mark.parametrize("fields", [{"prompt": ""}, {"prompt": "a", "max_new_tokens": 0},
                                    {"prompt": "a", "max_new_tokens": -3}, {"prompt": "a", "top_p": 0}])
def test_malformed_requests_are_refused_by_validation(fields):
    with pytest.raises(ValueError):
        GenerationRequest(**fields)


@pytest.mark.parametrize("field, value", [
    ("temperature", 1e-320), ("temperature", 0.009), ("temperature", -0.0001), ("temperature", True),
    ("temperature", float("inf")), ("top_p", float("nan")), ("max_new_tokens", True), ("max_new_tokens", 2.0),
    ("top_k", "3"), ("seed", False),
])
def test_numbers_are_strict_finite_and_temperature_is_greedy_or_above_its_floor(field, value):
    with pytest.raises(ValidationError) as refused:
        GenerationRequest(prompt="a", **{field: value})
    assert refused.value.errors()[0]["loc"] == (field,)


def test_the_temperature_floor_keeps_sampling_finite(engine64):
    result = engine64.run(GenerationRequest(prompt="hello", policy="talon", temperature=MIN_TEMPERATURE,
                                            max_new_tokens=8), detail=False)
    assert result.stop_reason in ("eos", "max_new_tokens") and result.new_tokens >= 1


def test_cancel_stops_within_one_step(engine64):
    steps = []
    result = engine64.run(GenerationRequest(prompt="hello", policy="talon", max_new_tokens=64),
                          emit=lambda e: steps.append(e.step) if e.type == "step_metrics" else None,
                          cancelled=lambda: len(steps) >= 2)
    assert result.stop_reason == "cancelled"
    assert result.steps == 2


def test_events_arrive_in_step_order_and_replay_from_a_trace(engine64, tmp_path):
    path = tmp_path / "run.jsonl"
    writer = TraceWriter(str(path))
    events = []
    engine64.run(GenerationRequest(prompt="hello there", policy="talon", max_new_tokens=24),
                 emit=lambda e: (events.append(e), writer(e)))
    writer.close()
    assert events[0].type == "run_started" and events[-1].type == "run_finished"
    per_step = [e.type for e in events if getattr(e, "step", None) == 1]
    assert per_step[0] == "draft_layer"
    assert per_step[-4:] == ["tree", "verify", "text", "step_metrics"]
    steps = [e.step for e in events if e.type == "step_metrics"]
    assert steps == list(range(1, len(steps) + 1))
    assert read_trace(str(path)) == events
    assert "".join(e.text for e in events if e.type == "text") == events[-1].text


def test_verification_verdicts_match_the_emitted_tokens(engine64):
    events = []
    engine64.run(GenerationRequest(prompt="verdicts", policy="eagle", max_new_tokens=32), emit=events.append)
    trees = {e.step: e for e in events if e.type == "tree"}
    for verify in (e for e in events if e.type == "verify"):
        tree = trees[verify.step]
        accepted = [n.node for n in verify.nodes if n.verdict == "accepted"]
        assert accepted == verify.accepted_path[1:]
        for node in accepted:
            assert tree.nodes[node].parent in verify.accepted_path


def word_tokenizer(words: list[str]) -> PreTrainedTokenizerFast:
    vocab = {word: i for i, word in enumerate(words)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=words[0]))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=words[0], eos_token=words[1])


def test_a_draft_with_another_tokenizer_is_refused(tmp_path):
    for name, words in (("target", ["<unk>", "<eos>", "a", "b"]), ("draft", ["<unk>", "<eos>", "c", "d"])):
        model = tiny_llama(seed=1, vocab_size=4)
        model.save_pretrained(tmp_path / name)
        word_tokenizer(words).save_pretrained(tmp_path / name)
    with pytest.raises(LoadError, match="different tokenizer"):
        load_engine(EngineOptions(target=str(tmp_path / "target"), draft=str(tmp_path / "draft"), dtype="float32"))
