"""What persists (no Qt): the SQLite store of conversations (their settings one JSON
column, migrated from older databases) and messages, the app settings, the data folder."""
