"""Between widgets and the engine: the bridge (engine events to Qt signals), chat sessions
and their registry, the chat and conversation-list models, model discovery."""
