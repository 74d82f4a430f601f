"""The node tests' copy of what the server serves (tests/js/served.mjs) is what it serves today: a changed
default, bound or presentation fails here, not silently in a test that reads an old value."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from engine.policies import policy_schemas
from engine.request import request_schema

ROOT = Path(__file__).resolve().parent.parent
DUMP = ("const m = await import(new URL('tests/js/served.mjs', 'file://' + process.cwd() + '/').href);"
        "process.stdout.write(JSON.stringify({policies: m.SERVED_POLICIES, request: m.SERVED_REQUEST}));")


def served_fixtures() -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None, "node is not installed: `make browser` installs it"
    result = subprocess.run([node, "--input-type=module", "-e", DUMP], cwd=ROOT, capture_output=True, text=True,
                            timeout=60, check=True)
    return json.loads(result.stdout)


def differences(fixture: Any, served: Any, where: str = "") -> list[str]:
    """Where `fixture` (a part of `served`) says something else than `served`."""
    if isinstance(fixture, dict):
        if not isinstance(served, dict):
            return [f"{where}: the server serves {served!r}"]
        return [problem for key, value in fixture.items()
                for problem in differences(value, served.get(key), f"{where}.{key}")]
    if _number(fixture) and _number(served):  # JavaScript's numbers are doubles: 2**63 - 1 reads as 2**63
        return [] if float(fixture) == float(served) else [f"{where}: the fixture says {fixture}, the server {served}"]
    return [] if fixture == served else [f"{where}: the fixture says {fixture!r}, the server {served!r}"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def test_the_node_tests_read_what_the_server_serves():
    fixtures = served_fixtures()
    served = {"policies": policy_schemas(), "request": request_schema()}
    assert differences(fixtures, served) == []
