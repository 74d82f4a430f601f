"""A step is reported as far as its text goes. Where the output ends inside a step (the first EOS, or
max_new_tokens, at an accepted draft), its verify event accepts nothing past the end, stops the walk there,
emits no recovered or bonus token, and says what step_metrics, the text and the run's output say."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from engine.drafters.suffix import SuffixDrafter
import engine.engine as engine_module
from engine.engine import SpecEngine
from engine.events import Verification, WalkNode
from engine.models.codec import ByteCodec
from engine.request import GenerationRequest
import shipped_traces
from tiny_models import TINY_EOS, TINY_VOCAB, CopyLM, tiny_engine

COPY_TEXT = "".join(chr(c) for c in random.Random(2).sample(range(33, 127), 40))  # distinct characters
COPY_PROMPT = "Copy: " + COPY_TEXT + " |" + COPY_TEXT[0]  # CopyLM copies the text on from its first character
PROMPTS = {"tiny": "the cat sat on the mat. the cat", "copy": COPY_PROMPT}
UNCUT = 60  # max_new_tokens of the run a cut is chosen from


@pytest.fixture(scope="module")
def models() -> dict[str, SpecEngine]:
    """A tiny Llama with a noisy copy as draft (shallow trees, rejections), and a target that copies its prompt
    under a suffix drafter (deep accepted paths)."""
    return {"tiny": tiny_engine(dtype=torch.float64, draft_noise=0.05, sharpness=4.0),
            "copy": SpecEngine(CopyLM(), ByteCodec(TINY_VOCAB, TINY_EOS), {"suffix": SuffixDrafter}, "suffix")}


def ending_at(engine: SpecEngine, eos_ids: set[int]) -> SpecEngine:
    """The same models with `eos_ids` as the end of text (none: the run goes on to max_new_tokens)."""
    codec = ByteCodec(TINY_VOCAB, TINY_EOS)
    codec.eos_ids = frozenset(eos_ids)
    return SpecEngine(engine.target, codec, engine.drafters, engine.default_drafter, draft_lm=engine.draft_lm)


def run_events(engine: SpecEngine, target: str, policy: str, temperature: float,
               max_new_tokens: int) -> tuple[list[Any], list[int], str]:
    events: list[Any] = []
    result = engine.run(GenerationRequest(prompt=PROMPTS[target], policy=policy, temperature=temperature, seed=5,
                                          max_new_tokens=max_new_tokens), events.append)
    return events, result.tokens, result.stop_reason


def by_step(events: list[dict[str, Any]]) -> dict[int, dict[str, dict[str, Any]]]:
    steps: dict[int, dict[str, dict[str, Any]]] = {}
    for event in events:
        if "step" in event:
            steps.setdefault(event["step"], {})[event["type"]] = event
    return steps


def disagreements(events: list[dict[str, Any]]) -> list[str]:
    """Where a step's verify event reports other than what the step emitted: a node accepted past the end of
    the text, or an accepted count, emitted token or walk that step_metrics and the text event contradict."""
    found = []
    for step, events_of in by_step(events).items():
        verify, text, metrics = events_of.get("verify"), events_of["text"], events_of["step_metrics"]
        if verify is None:
            continue
        path, emitted = verify["accepted_path"], verify["emitted"]
        token_of = {node["node"]: node["token"] for node in verify["nodes"]}
        accepted = [node["node"] for node in verify["nodes"] if node["verdict"] == "accepted"]
        reported = [token_of[node] for node in path[1:]] + ([emitted["token"]] if emitted else [])
        if sorted(accepted) != sorted(path[1:]):
            found.append(f"step {step}: nodes {accepted} accepted, accepted_path {path}")
        if not len(path) - 1 == metrics["accepted"] == text["accepted"]:
            found.append(f"step {step}: accepted_path holds {len(path) - 1} drafts, step_metrics says "
                         f"{metrics['accepted']} accepted, the text {text['accepted']}")
        if not reported == text["tokens"] or len(reported) != metrics["emitted"]:
            found.append(f"step {step}: the verify event emits {reported}, the text {text['tokens']}, "
                         f"step_metrics {metrics['emitted']} tokens")
        if verify.get("walk") is not None and [node["node"] for node in verify["walk"]] != path:
            found.append(f"step {step}: the walk visits {[node['node'] for node in verify['walk']]}, "
                         f"accepted_path {path}")
    return found


def choose_cut(events: list[Any], tokens: list[int], eos: bool) -> tuple[int, int, int]:
    """A step of an uncut run and how many of its accepted drafts to keep, with as many accepted drafts kept
    as past the cut (the latest step among equals): (step, drafts kept, output tokens before the step).
    With `eos`, the kept draft's token must not occur earlier in the output, so that it ends the text there."""
    steps = by_step([event.model_dump(mode="json") for event in events])
    options = []
    for step, events_of in steps.items():
        verify, metrics = events_of["verify"], events_of["step_metrics"]
        before = metrics["new_tokens"] - metrics["emitted"]
        drafts = len(verify["accepted_path"]) - 1 if verify["emitted"] else 0  # a step already cut: not this one
        for kept in range(1, drafts):
            if not eos or tokens[before + kept - 1] not in tokens[:before + kept - 1]:
                options.append((min(kept, drafts - kept), step, kept, before))
    assert options, "no step of the uncut run accepted two drafts: nothing to cut inside a step"
    _, step, kept, before = max(options)
    return step, kept, before


def cut_report(uncut: Verification, tree_parent: list[int], kept: int) -> Verification:
    """The uncut step's verify event as it reads when the text ends after `kept` of its accepted drafts: the
    walk's verdicts below the kept path stand, every node past the end is unreached, nothing is emitted."""
    path = uncut.accepted_path[:kept + 1]
    decided = set(path[:-1])  # the nodes whose children the walk tried before the text ended
    nodes = [node if tree_parent[node.node] in decided else node.model_copy(update={"verdict": "unreached", "p": None})
             for node in uncut.nodes]
    end = WalkNode(node=path[-1], top=uncut.walk[kept].top, checks=[])
    return uncut.model_copy(update={"nodes": nodes, "emitted": None, "accepted_path": path,
                                    "walk": uncut.walk[:kept] + [end]})


def without_run_id(event: Any) -> dict[str, Any]:
    return {key: value for key, value in event.model_dump().items() if key != "run_id"}


def assert_cut_inside_the_step(uncut_events: list[Any], uncut_tokens: list[int], events: list[Any],
                               tokens: list[int], step: int, kept: int, before: int) -> None:
    dumped = [event.model_dump(mode="json") for event in events]
    assert disagreements(dumped) == []
    assert tokens == uncut_tokens[:before + kept]
    details = ("draft_layer", "tree", "verify", "text")
    earlier = [without_run_id(e) for e in uncut_events if e.type in details and e.step < step]
    assert [without_run_id(e) for e in events if e.type in details and e.step < step] == earlier
    uncut = next(e for e in uncut_events if e.type == "verify" and e.step == step)
    tree = next(e for e in uncut_events if e.type == "tree" and e.step == step)
    last = [e for e in events if e.type == "verify"][-1]
    assert last.step == step
    assert without_run_id(last) == without_run_id(cut_report(uncut, [node.parent for node in tree.nodes], kept))
    assert uncut.emitted is not None and len(uncut.accepted_path) - 1 > kept, "the uncut step goes on past the cut"
    metrics = [e for e in events if e.type == "step_metrics"][-1]
    assert (metrics.accepted, metrics.emitted, metrics.new_tokens) == (kept, kept, len(tokens))
    assert [e.type for e in events].count("verify") == step


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("policy", ["talon", "chain"])
@pytest.mark.parametrize("target", ["tiny", "copy"])
def test_a_step_cut_at_eos_accepts_nothing_past_it_and_agrees_with_its_metrics(models, target, policy, temperature):
    uncut_events, uncut_tokens, _ = run_events(ending_at(models[target], set()), target, policy, temperature, UNCUT)
    step, kept, before = choose_cut(uncut_events, uncut_tokens, eos=True)
    eos = uncut_tokens[before + kept - 1]
    events, tokens, stop = run_events(ending_at(models[target], {eos}), target, policy, temperature, UNCUT)
    assert stop == "eos"
    assert_cut_inside_the_step(uncut_events, uncut_tokens, events, tokens, step, kept, before)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("policy", ["talon", "chain"])
@pytest.mark.parametrize("target", ["tiny", "copy"])
def test_a_step_cut_at_max_new_tokens_accepts_nothing_past_it_and_agrees_with_its_metrics(
        models, target, policy, temperature, monkeypatch):
    """The engine drafts no deeper than the tokens a request may still emit, so a cut at max_new_tokens inside
    a step needs drafts let deeper than that, as a drafter that overran its depth would give."""
    monkeypatch.setattr(engine_module._Run, "_depth_room",
                        lambda run: run.target.max_length - run.target.cache_len - 1)
    engine = ending_at(models[target], set())
    uncut_events, uncut_tokens, _ = run_events(engine, target, policy, temperature, UNCUT)
    step, kept, before = choose_cut(uncut_events, uncut_tokens, eos=False)
    events, tokens, stop = run_events(engine, target, policy, temperature, before + kept)
    assert stop == "max_new_tokens"
    assert_cut_inside_the_step(uncut_events, uncut_tokens, events, tokens, step, kept, before)


@pytest.mark.parametrize("max_new_tokens", [1, 2, 7, 20])
@pytest.mark.parametrize("policy", ["talon", "chain", "eagle", "ar"])
def test_every_step_of_a_run_reports_what_it_emitted(models, policy, max_new_tokens):
    for target in PROMPTS:
        events, tokens, _ = run_events(models[target], target, policy, 0.0, max_new_tokens)
        assert disagreements([event.model_dump(mode="json") for event in events]) == []
        assert [t for e in events if e.type == "text" for t in e.tokens] == tokens


@pytest.mark.parametrize("name", shipped_traces.names())
def test_no_shipped_trace_accepts_a_node_past_the_end_of_its_text(name):
    for run in shipped_traces.runs(name):
        assert disagreements(run) == [], f"{name}: the {run[0]['policy']} run"
