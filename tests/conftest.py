import os

import pytest
import torch

from tiny_models import tiny_engine

# Engines loaded by the tests (on CI's empty cache) do not measure a default policy on first load: that takes a
# minute per dtype and would make the default depend on the machine. tests/test_default_policy.py tests it.
os.environ.setdefault("SPECSCOPE_CALIBRATE", "0")

ALL_THREADS = torch.get_num_threads()


@pytest.fixture(scope="session")
def engine64():
    """Tiny float64 target with a noisy-copy draft LM: exact arithmetic for equality tests."""
    return tiny_engine(dtype=torch.float64)


def random_prompts(count: int, seed: int) -> list[str]:
    import random

    rng = random.Random(seed)
    return ["".join(chr(rng.randrange(97, 123)) for _ in range(rng.randrange(2, 24))) for _ in range(count)]


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through Playwright, one per browser-test module (tests/browser_harness.py)."""
    from browser_harness import chromium

    with chromium() as browser:
        yield browser


@pytest.fixture(autouse=True)
def one_thread_for_tiny_models(request):
    """Tiny models run fastest on one thread; tests of the real model ask for every core."""
    torch.set_num_threads(ALL_THREADS if "slow" in request.keywords else 1)


@pytest.fixture(autouse=True, scope="session")
def test_client_host_is_allowed():
    """Starlette's TestClient sends `Host: testserver`; the app's Host allow-list serves it here as it would
    a name given with --allowed-hosts. Tests of the allow-list pass their own `allowed_hosts`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECSCOPE_ALLOWED_HOSTS", "testserver")
        yield
