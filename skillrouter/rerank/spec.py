"""What a reranker is: a plain dataclass, importable without torch (planning a grid reads it; scoring
with it loads the model, :mod:`.scorers`)."""
from __future__ import annotations

from dataclasses import dataclass


PAIR_HEADS = ("seq_cls", "segment_cosine")  # heads that read a (query, skill) pair as the tokenizer builds it


@dataclass(frozen=True)
class RerankerSpec:
    model: str
    head: str = "seq_cls"  # seq_cls | segment_cosine | causal_lm | st_cross_encoder
    max_length: int = 256
    instruction: str = "Given a task, judge whether this agent skill helps complete it"
    batch_size: int = 32
    prompt_format: str = "qwen3"  # qwen3 | flat-full | flat-nd | struct | r3 | skillret (see skillrouter.fields)
    body_max_tokens: int = 4096   # st_cross_encoder: body segment cut (R3)
    query_max_tokens: int | None = None  # seq_cls / qwen3 prompts: the query is cut to this first, the skill gets the rest
    trust_remote_code: bool = False
    temperature: float = 0.05  # segment_cosine: the score is the segments' cosine over this
