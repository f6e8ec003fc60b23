"""The terminal front-end behind ``python -m engine``: the command line (cli.py), the
chat REPL (chat_repl.py) with its line history (line_history.py) and quiet input while
a reply streams (quiet_input.py), and the sampling options built from
engine/settings_spec.py (sampling_args.py). Nothing else in the engine imports it."""
