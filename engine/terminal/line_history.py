"""Line editing and a saved history for the terminal chat (the stdlib readline)."""
from __future__ import annotations

import sys
from pathlib import Path

HISTORY_LINES = 1000


def default_history_path() -> Path:
    """Where the chat's input history is kept between runs."""
    import platformdirs
    return Path(platformdirs.user_data_dir("Tandem")) / "chat_history"


class LineHistory:
    """With readline (Linux, macOS): arrow keys edit the line, Up/Down recall earlier
    lines, and the last HISTORY_LINES lines are saved to `path` on close.
    Without it (Windows without pyreadline), input() still works, just plainly."""

    def __init__(self, path: Path | None):
        self.path = path
        try:
            import readline
        except ImportError:
            readline = None
        self._readline = readline if path is not None else None
        if self._readline is not None:
            self._load()

    @property
    def enabled(self) -> bool:
        return self._readline is not None

    def _load(self) -> None:
        self._readline.set_history_length(HISTORY_LINES)
        try:
            self._readline.read_history_file(str(self.path))
        except FileNotFoundError:
            pass                     # the first run
        except OSError:
            pass                     # unreadable: start a fresh one, overwritten on close

    def close(self) -> None:
        """Save the history (a failure to write it is reported, never raised)."""
        if self._readline is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._readline.write_history_file(str(self.path))
        except OSError as e:
            print(f"note: the chat history was not saved to {self.path}: {e}", file=sys.stderr)
