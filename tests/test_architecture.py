"""The engine knows nothing of the web."""

import subprocess
import sys

ENGINE_MODULES = ["engine.engine", "engine.cli", "engine.bench", "engine.loading", "engine.profile",
                  "engine.policies", "engine.drafters.draft_lm", "engine.drafters.prompt_lookup", "engine.events"]


def test_the_engine_and_its_cli_never_import_fastapi():
    code = ("import sys, importlib\n"
            f"for name in {ENGINE_MODULES!r}: importlib.import_module(name)\n"
            "import engine.cli; engine.cli.build_parser()\n"
            "assert 'fastapi' not in sys.modules and 'starlette' not in sys.modules, 'the web stack leaked in'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
