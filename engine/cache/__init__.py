"""Memory for attention KV pages, recurrent-state slots and finished turns kept for the next turn."""
