"""How to ask for an engine, declared once.

`EngineOptions` names the target, its drafters, the dtype, the device and the
cost table, with their defaults. The command line's flags are generated from
it (`add_arguments`), the server's settings inherit it (read from SPECSCOPE_*
variables too), and `engine.loading.load_engine` takes it: the CLI, the
benchmark, the tools and the server cannot ask for an engine differently.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class EngineOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str | None = Field(None, description="target model: a Hugging Face id or a folder "
                                                 "(default: the embedded SmolLM2-135M-Instruct)")
    draft: str | None = Field(None, description="draft LM sharing the target's tokenizer: a hub id or a folder")
    head: str | None = Field(None, description="EAGLE-3 draft head: a folder or a hub id "
                                               "(default: the shipped head of the embedded target)")
    drafter: str | None = Field(None, description="the drafter used when a request names none "
                                                  "(default: the best one loaded)")
    dtype: str | None = Field(None, description="float32, bfloat16 or float16 (default: the device's best)")
    device: str | None = Field(None, description="cpu, cuda or mps (default: the best available)")
    cost_table: Path | None = Field(None, description="cost table from `specscope profile` (default: the one saved "
                                                      "for this device, model and dtype; none: assumed costs)")
    suffix_memory: Path | None = Field(None, description="a file that keeps the suffix drafter's memory of earlier "
                                                          "requests across processes (read at load, written after "
                                                          "each run; default: memory lives in the process only)")
    suffix_memory_tokens: int | None = Field(None, ge=0, description="the suffix memory's token budget per policy; "
                                                                     "the oldest requests go first (default: 65536; "
                                                                     "0 turns memory off)")
    calibrate: bool | None = Field(None, description="where no default policy is recorded for this device, model and "
                                                     "dtype, measure one on first load: every policy on 4 short prompts, "
                                                     "about a minute, once (default: on; SPECSCOPE_CALIBRATE=0 turns it off)")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """One `--flag` per option; unset flags stay None so that other sources (the environment) can fill them."""
        for name, field in cls.model_fields.items():
            parser.add_argument(f"--{name.replace('_', '-')}", default=None, help=field.description)

    @classmethod
    def given_in(cls, args: argparse.Namespace) -> dict[str, Any]:
        """The options a parsed command line set."""
        return {name: getattr(args, name) for name in cls.model_fields if getattr(args, name, None) is not None}

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "EngineOptions":
        return cls(**cls.given_in(args))

    def engine_options(self) -> "EngineOptions":
        """Just the engine's options (a subclass, such as the server's settings, carries more)."""
        return EngineOptions(**{name: getattr(self, name) for name in EngineOptions.model_fields})
