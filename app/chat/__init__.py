"""Chat widgets: the message list, message bubbles, reasoning blocks, Markdown and code
rendering, the composer, the sidebar's row painter; plus the plain-text splitting they
use (think_text, markdown_segments: no Qt)."""
