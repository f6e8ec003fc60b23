"""Between widgets and the engine: the bridge (engine events to Qt signals), chat sessions, list models, model discovery."""
