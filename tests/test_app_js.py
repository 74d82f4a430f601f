"""Runs the front end's pure-module tests (`node --test tests/js/`) as part of pytest, so CI runs them too."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent


def test_front_end_pure_module_passes_its_node_tests():
    node = shutil.which("node")
    assert node is not None, "node is not installed: `make browser` installs it"
    result = subprocess.run([node, "--test", "tests/js/"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
