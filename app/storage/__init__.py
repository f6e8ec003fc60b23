"""What persists: the SQLite store of conversations and messages, settings, the data folder."""
