"""LLM data synthesis: the training pairs, Hard-tier distractors, Oracle-ND descriptions, evaluation
queries and WRITE/SKIP labels both papers made with LLMs, as cached, resumable stages on any
OpenAI-compatible server (client, stub server, server lifecycle, one module per paper's stages)."""
