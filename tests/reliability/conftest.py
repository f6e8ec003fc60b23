"""Fault-injection suite of issue 17 (docs/RELIABILITY.md).

Anything that could crash the process or hang runs in a subprocess with a timeout
(reliability_util.run_script), or waits on a request with a timeout, so a regression
fails a test instead of killing or hanging pytest.
"""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    from tiny_models import write_tiny_llama
    return write_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")
