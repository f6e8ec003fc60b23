"""SamplingParams' defaults and validation come from engine/settings_spec.py;
bad values fail early with a message that says what is allowed (issue 17 #11)."""
from __future__ import annotations

import argparse
import dataclasses
import math

import pytest

from engine.sampling_params import REQUEST_ONLY_FIELDS, SamplingParams
from engine.settings_spec import BY_NAME, SAMPLING, SEED_LIMIT, settings_or_defaults
from engine.terminal.sampling_args import add_sampling_arguments, sampling_params_from_args


def test_fields_and_defaults_are_the_specs():
    fields = {f.name: f.default for f in dataclasses.fields(SamplingParams)
              if f.name not in REQUEST_ONLY_FIELDS}
    assert fields == {s.name: s.default for s in SAMPLING}
    assert "system_prompt" in BY_NAME and "system_prompt" not in fields   # a conversation setting


@pytest.mark.parametrize("kw, allowed", [
    ({"temperature": math.nan}, "temperature must be a number in [0, inf)"),
    ({"temperature": math.inf}, "temperature must be a number in [0, inf)"),
    ({"repetition_penalty": math.nan}, "repetition_penalty must be a number in (0, inf)"),
    ({"repetition_penalty": 0.0}, "repetition_penalty must be a number in (0, inf)"),
    ({"top_p": 0.0}, "top_p must be a number in (0, 1]"),
    ({"min_p": 1.0}, "min_p must be a number in [0, 1)"),
    ({"top_k": -1}, "top_k must be an integer in [0, inf)"),
    ({"max_tokens": 0}, "max_tokens must be an integer in [1, 1048576]"),
    ({"seed": -1}, "seed must be an integer in [0, 2**64) or None"),
    ({"seed": SEED_LIMIT}, "seed must be an integer in [0, 2**64) or None"),
])
def test_out_of_range_values_say_what_is_allowed(kw, allowed):
    with pytest.raises(ValueError) as err:
        SamplingParams(**kw)
    assert allowed in str(err.value)


@pytest.mark.parametrize("kw", [{"max_tokens": 2.5}, {"max_tokens": "64"}, {"top_k": True},
                                {"temperature": "0.7"}, {"seed": 1.5}])
def test_wrong_types_are_rejected_not_rounded(kw):
    [name] = kw
    with pytest.raises(TypeError, match=f"{name} must be"):
        SamplingParams(**kw)


def test_seed_range_ends_are_accepted_and_whole_floats_become_ints():
    assert SamplingParams(seed=0).seed == 0
    assert SamplingParams(seed=SEED_LIMIT - 1).seed == SEED_LIMIT - 1
    p = SamplingParams(max_tokens=64.0, temperature=1)
    assert p.max_tokens == 64 and type(p.max_tokens) is int and type(p.temperature) is float


def test_stop_strings():
    assert SamplingParams(stop="END").stop == ("END",)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")
    with pytest.raises(ValueError, match="non-empty"):
        SamplingParams(stop=("",))
    with pytest.raises(TypeError, match="stop must be a list of non-empty strings; got None"):
        SamplingParams(stop=(None,))
    with pytest.raises(TypeError, match="stop must be"):
        SamplingParams(stop=5)


def test_from_settings_ignores_conversation_settings():
    values = settings_or_defaults({"temperature": 0.4, "top_k": 20, "system_prompt": "Hi."})
    p = SamplingParams.from_settings(values, max_tokens=9)
    assert (p.temperature, p.top_k, p.max_tokens) == (0.4, 20, 9)


def test_stored_values_fall_back_per_setting():
    values = settings_or_defaults({"temperature": math.nan, "top_p": 0.5, "unknown": 1})
    assert values["temperature"] == BY_NAME["temperature"].chat_default
    assert values["top_p"] == 0.5 and "unknown" not in values


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_sampling_arguments(p)
    return p


def test_cli_defaults_are_the_engine_defaults():
    assert sampling_params_from_args(_parser().parse_args([])) == SamplingParams()


def test_cli_options_one_per_setting():
    args = _parser().parse_args(["--temperature", "0.8", "--top-p", "0.9", "--top-k", "40",
                                 "--min-p", "0.05", "--repetition-penalty", "1.1",
                                 "--max-tokens", "64", "--seed", "7", "--stop", "END",
                                 "--stop", "###"])
    assert sampling_params_from_args(args) == SamplingParams(
        temperature=0.8, top_p=0.9, top_k=40, min_p=0.05, repetition_penalty=1.1,
        max_tokens=64, seed=7, stop=("END", "###"))


def test_cli_help_shows_help_text_range_and_default():
    text = " ".join(_parser().format_help().split())
    for s in SAMPLING:
        assert f"--{s.name.replace('_', '-')}" in text
        assert " ".join(s.help.split()) in text
    assert "(default: 512)" in text and "(default: random)" in text


@pytest.mark.parametrize("argv, message", [
    (["--temperature", "nan"], "temperature must be a number in [0, inf)"),
    (["--seed", "-3"], "seed must be an integer in [0, 2**64)"),
    (["--max-tokens", "2.5"], "must be an integer in [1, 1048576]"),
])
def test_cli_bad_value_is_a_usage_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        _parser().parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_empty_stop_is_reported(capsys):
    from engine.terminal.cli import run_generate
    args = _parser().parse_args(["--stop", ""])
    args.model, args.prompt, args.trace = None, ["hi"], None
    assert run_generate(args) == 2                     # before any model is loaded
    assert "stop strings must be non-empty" in capsys.readouterr().err
