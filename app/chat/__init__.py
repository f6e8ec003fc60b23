"""Chat widgets: the message list, message bubbles, Markdown and code rendering, the composer."""
