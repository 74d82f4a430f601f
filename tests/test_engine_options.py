"""One way to ask for an engine: the same options, the same checks and the same cost decision in CLI, bench and server."""

from __future__ import annotations

import argparse
import json

from fastapi.testclient import TestClient

from app.main import create_app
from app.serve import add_arguments as add_serve_arguments
from app.settings import ServerSettings
from cli.main import build_parser
from engine.options import EngineOptions
from tiny_models import tiny_engine
from test_cli import run_cli, tiny_target  # noqa: F401  (a fixture)

ENGINE_FLAGS = {"--target", "--draft", "--head", "--drafter", "--dtype", "--device", "--cost-table"}


def flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def test_every_engine_command_and_the_server_take_the_same_engine_options():
    subcommands = build_parser()._subparsers._group_actions[0].choices
    for name in ("generate", "bench", "profile", "record", "serve"):
        assert ENGINE_FLAGS <= flags(subcommands[name]), name
    serve = argparse.ArgumentParser()
    add_serve_arguments(serve)
    assert ENGINE_FLAGS <= flags(serve)
    assert set(EngineOptions.model_fields) <= set(ServerSettings.model_fields)


def test_cast_without_a_cost_table_reads_assumed_costs_and_says_so_in_cli_bench_and_server(
        tiny_target, capsys, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path / "cache"))  # no saved table here
    code, out, _ = run_cli(capsys, "generate", "w5 w6 w7", "--target", tiny_target, "--dtype", "float32",
                           "--policy", "cast", "--max-new-tokens", "8")
    assert code == 0 and "costs are assumed" in out
    prompts = tmp_path / "q.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "t", "turns": ["w5 w6"]}) + "\n")
    code, out, _ = run_cli(capsys, "bench", "--prompts", str(prompts), "--policies", "cast", "--target", tiny_target,
                           "--dtype", "float32", "--max-new-tokens", "6", "--out", str(tmp_path / "bench"))
    assert code == 0 and "costs are assumed" in out
    engine = tiny_engine()
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: engine)) as client:
        info = client.get("/api/info").json()
        assert info["costs"] == "assumed" and "specscope profile" in info["costs_note"]
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "run", "prompt": "hi", "policy": "cast", "max_new_tokens": 3})
            started = ws.receive_json()
            while ws.receive_json()["type"] != "run_finished":
                pass
    assert started["type"] == "run_started" and started["costs"]["source"] == "assumed"


def test_a_prompt_longer_than_the_context_is_refused_before_it_waits_in_line():
    engine = tiny_engine()
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: engine)) as client:
        with client.websocket_connect("/ws") as busy, client.websocket_connect("/ws") as late:
            busy.send_json({"type": "run", "prompt": "hello", "policy": "ar", "max_new_tokens": 900})
            assert busy.receive_json()["type"] == "run_started"  # the model is taken
            late.send_json({"type": "run", "prompt": "x" * 1500, "policy": "ar", "max_new_tokens": 4})
            reply = late.receive_json()
            busy.send_json({"type": "cancel"})
    assert reply["type"] == "error" and reply["field"] == "prompt" and "context" in reply["message"]
