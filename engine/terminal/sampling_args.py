"""Command-line options for the sampling settings, built from engine/settings_spec.py."""
from __future__ import annotations

import argparse

from engine.sampling_params import SamplingParams
from engine.settings_spec import BY_NAME, SAMPLING, Setting

# Why the two sets of defaults (both declared once, in engine/settings_spec.py).
CHAT_DEFAULTS = ("defaults as a new conversation in the app (settings_spec's chat "
                 "defaults: sampled, longer replies)")
ENGINE_DEFAULTS = ("defaults are the engine's (settings_spec's default): greedy, so the "
                   "same prompts give the same output; `chat` starts as the app's new "
                   f"conversations do (temperature {BY_NAME['temperature'].chat_default}, "
                   f"{BY_NAME['max_tokens'].chat_default} tokens)")


def add_sampling_arguments(parser: argparse.ArgumentParser, chat: bool = False) -> None:
    """--max-tokens, --temperature, ... (one per sampling setting) and --stop; chat: the
    app's new-conversation defaults instead of the engine's."""
    group = parser.add_argument_group("sampling", CHAT_DEFAULTS if chat else ENGINE_DEFAULTS)
    for s in SAMPLING:
        value = s.chat_default if chat else s.default
        shown = "random" if value is None else value
        group.add_argument(f"--{s.name.replace('_', '-')}", dest=s.name, type=_parser_for(s),
                           default=value, metavar=s.type.__name__.upper(),
                           help=f"{s.help}; {s.range_text()} (default: {shown})")
    group.add_argument("--stop", action="append", default=[], metavar="TEXT",
                       help="end the reply where this text appears (repeat for several)")


def sampling_params_from_args(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(stop=tuple(args.stop),
                          **{s.name: getattr(args, s.name) for s in SAMPLING})


def _parser_for(setting: Setting):
    """argparse `type`: parse and check the range, so a bad value is a usage error
    (one line naming the option and what it allows), not a traceback."""
    def parse(text: str):
        try:
            value = setting.type(text) if setting.type is not int else int(text, 0)
            return setting.check(value)
        except (TypeError, ValueError) as exc:
            msg = str(exc) if setting.name in str(exc) else f"must be {setting.range_text()}"
            raise argparse.ArgumentTypeError(msg) from None
    parse.__name__ = setting.type.__name__      # argparse names the type in its message
    return parse
