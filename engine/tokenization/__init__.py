"""Text to token ids and back: HF and GGUF tokenizers, chat templates, the incremental detokenizer."""
