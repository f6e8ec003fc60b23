import mlx.core as mx
import pytest

from kernels.backend import absent_reason, gpu_backend


@pytest.fixture
def backend() -> str:
    """The GPU backend the kernels launch on; skips the test where there is none."""
    b = gpu_backend()
    if b is None:
        pytest.skip(f"kernel not runnable: {absent_reason()}")
    return b


@pytest.fixture
def cpu_stream():
    """Reference-vs-numpy checks run on the CPU: CUDA float32 matmuls use TF32 (~1e-4
    off), which says nothing about whether the reference is right."""
    with mx.stream(mx.cpu):
        yield
