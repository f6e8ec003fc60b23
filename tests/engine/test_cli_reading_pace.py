"""The reading-pace floor from the command line: chat/generate and serve pass it on."""
from __future__ import annotations

import argparse

import pytest

from engine.config import EngineConfig
from engine.server.standalone import add_serve_args
from engine.terminal.cli import add_model_args, engine_config


def _parse(add, argv):
    p = argparse.ArgumentParser()
    add(p)
    return p.parse_args(argv)


def test_the_default_is_the_engine_default():
    assert engine_config(_parse(add_model_args, [])).min_stream_tok_s == \
        EngineConfig.min_stream_tok_s


@pytest.mark.parametrize("value", ["0", "30"])
def test_chat_and_generate_pass_the_floor_on(value):
    args = _parse(add_model_args, ["--reading-pace", value])
    assert engine_config(args).min_stream_tok_s == float(value)


def test_serve_takes_it_too():
    assert _parse(add_serve_args, ["--reading-pace", "8"]).reading_pace == 8.0


def test_a_negative_floor_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="tokens per second >= 0"):
        engine_config(_parse(add_model_args, ["--reading-pace", "-1"]))
