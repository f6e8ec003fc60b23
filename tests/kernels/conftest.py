import mlx.core as mx
import pytest

from kernels import registry


@pytest.fixture
def backend() -> str:
    """The GPU backend the kernels launch on; skips the test where there is none."""
    b = registry.gpu_backend()
    if b is None:
        pytest.skip(f"kernel not runnable: {registry.absent_reason()}")
    return b


@pytest.fixture(autouse=True)
def _fresh_registry():
    """A test that disables a kernel must not leak that into the next test."""
    yield
    for name in registry.NAMES:
        registry.enable(name)


@pytest.fixture
def cpu_stream():
    """Reference-vs-numpy checks run on the CPU: CUDA float32 matmuls use TF32 (~1e-4
    off), which says nothing about whether the reference is right."""
    with mx.stream(mx.cpu):
        yield
