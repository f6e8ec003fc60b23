"""engine/models/shapes.reshaped: a reshape onto the same shape adds no graph node."""
from __future__ import annotations

import io

import mlx.core as mx
import pytest

from engine.models.shapes import reshaped


def _reshape_nodes(x: mx.array) -> int:
    dot = io.StringIO()
    mx.export_to_dot(dot, x)
    return dot.getvalue().count('"Reshape"')


def test_mlx_builds_a_node_for_a_minus_one_shape_onto_the_same_shape():
    """The reason for the helper: if MLX stops doing this, reshaped() can go."""
    x = mx.zeros((2, 3)) + 1
    assert _reshape_nodes(x.reshape(-1, 3)) == 1 and _reshape_nodes(x.reshape(2, 3)) == 0


@pytest.mark.parametrize("shape", [(-1, 3), (2, -1), (2, 3)])
def test_the_same_shape_is_the_same_array(shape):
    x = mx.zeros((2, 3)) + 1
    assert reshaped(x, *shape) is x and _reshape_nodes(reshaped(x, *shape)) == 0


@pytest.mark.parametrize("shape, want", [((-1,), (6,)), ((3, -1), (3, 2)), ((1, 2, -1), (1, 2, 3))])
def test_another_shape_is_a_reshape(shape, want):
    x = mx.arange(6).reshape(2, 3)
    y = reshaped(x, *shape)
    assert y.shape == want and y.reshape(-1).tolist() == list(range(6))
