"""Second-stage rerankers: cross-encoders, Qwen3-style yes/no causal LMs, an LLM judge."""
