"""Moved to engine/terminal/cli.py. Kept only for engine/server/standalone.py's import of
add_reading_pace_arg (another owner's file); remove once that import names
engine.terminal.cli."""
from engine.terminal.cli import add_reading_pace_arg

__all__ = ["add_reading_pace_arg"]
