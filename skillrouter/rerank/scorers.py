"""Cross-encoder scoring heads, trainable and usable at evaluation.

* ``seq_cls``: an ordinary sequence-classification cross-encoder (one logit per (query, skill) pair);
* ``causal_lm``: Qwen3-Reranker style: the pair is written into a yes/no judging prompt and the score
  is logit("yes") - logit("no") at the last position (inputs left-padded so that is position -1).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

from ..models import device, resolve_model

QWEN3_PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the "
                "Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n")
QWEN3_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


@dataclass(frozen=True)
class RerankerSpec:
    model: str
    head: str = "seq_cls"  # seq_cls | causal_lm
    max_length: int = 256
    instruction: str = "Given a task, judge whether this agent skill helps complete it"
    batch_size: int = 32


class PairScorer(nn.Module):
    """Scores (query, skill text) pairs; gradients flow, so the same object trains and evaluates."""

    def __init__(self, spec: RerankerSpec, model_path: str | None = None, lora: dict | None = None):
        super().__init__()
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

        self.spec = spec
        path = model_path or resolve_model(spec.model)
        adapter = Path(path, "adapter_config.json").exists()
        base_path = self._adapter_base(path) if adapter else path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if spec.head == "seq_cls":
            model = AutoModelForSequenceClassification.from_pretrained(base_path, num_labels=1)
        elif spec.head == "causal_lm":
            self.tokenizer.padding_side = "left"
            model = AutoModelForCausalLM.from_pretrained(base_path)
            self.yes_id = self.tokenizer.convert_tokens_to_ids("yes")
            self.no_id = self.tokenizer.convert_tokens_to_ids("no")
            if self.yes_id == self.tokenizer.unk_token_id or self.no_id == self.tokenizer.unk_token_id:
                raise ValueError(f"{path}: tokenizer has no single 'yes'/'no' tokens for a causal-LM reranker")
        else:
            raise ValueError(f"reranker.head must be seq_cls or causal_lm, got {spec.head!r}")
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model.config.pad_token_id = self.tokenizer.pad_token_id
        if adapter:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, path)
        elif lora:
            from peft import LoraConfig, get_peft_model

            task = "SEQ_CLS" if spec.head == "seq_cls" else "CAUSAL_LM"
            model = get_peft_model(model, LoraConfig(task_type=task, target_modules="all-linear", **lora))
        self.model = model.to(device())

    @staticmethod
    def _adapter_base(path: str) -> str:
        import json

        return json.loads(Path(path, "adapter_config.json").read_text())["base_model_name_or_path"]

    def _causal_inputs(self, queries: list[str], docs: list[str]) -> dict[str, Tensor]:
        """prefix + ``<Instruct>/<Query>/<Document>`` + suffix, fit to ``max_length`` by cutting the
        document; the instruction+query head is cut (from its end) only where it would leave the
        document less than a quarter of the budget."""
        tok = self.tokenizer

        def ids(texts: list[str]) -> list[list[int]]:
            return tok(texts, add_special_tokens=False)["input_ids"]

        prefix, suffix = ids([QWEN3_PREFIX])[0], ids([QWEN3_SUFFIX])[0]
        heads = ids([f"<Instruct>: {self.spec.instruction}\n<Query>: {q}\n<Document>: " for q in queries])
        budget = self.spec.max_length - len(prefix) - len(suffix)
        rows = []
        for head, doc in zip(heads, ids(docs)):
            head = head[: budget - min(len(doc), budget // 4)]
            rows.append(prefix + head + doc[: budget - len(head)] + suffix)
        return tok.pad({"input_ids": rows}, padding=True, return_tensors="pt")

    def forward(self, queries: list[str], docs: list[str]) -> Tensor:
        """``[N]`` scores for N pairs."""
        if self.spec.head == "seq_cls":
            enc = self.tokenizer(queries, docs, truncation="longest_first", max_length=self.spec.max_length,
                                 padding=True, return_tensors="pt").to(self.model.device)
            return self.model(**enc).logits[:, 0]
        enc = self._causal_inputs(queries, docs).to(self.model.device)
        logits = self.model(**enc).logits[:, -1, :]
        return logits[:, self.yes_id] - logits[:, self.no_id]

    @torch.no_grad()
    def score(self, queries: list[str], docs: list[str]) -> list[float]:
        self.eval()
        out: list[float] = []
        bs = self.spec.batch_size
        for i in range(0, len(queries), bs):
            out += self(queries[i: i + bs], docs[i: i + bs]).float().cpu().tolist()
        return out

    def save(self, out_dir: Path) -> None:
        """Full weights, or only the LoRA adapter (which records its base path)."""
        self.model.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)
