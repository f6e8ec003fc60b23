"""Finding, validating and reading model files (MLX folders, HF safetensors, GGUF) into models."""
