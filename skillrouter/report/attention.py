"""Length-controlled field attention of a yes/no LM reranker (SkillRouter's attention diagnostic).

    python -m skillrouter.report.attention RUN_DIR [--max-pairs 200] [--out reports/attention] [--name NAME]

For each scored query–GT pair of a run whose reranker is a causal LM judging yes/no (``head: causal_lm``,
e.g. Qwen3-Reranker, trained or as released), the flattened reranker input is built exactly as scoring
built it, and each document token is assigned to the field it came from (name, description, body: the
field's characters located in the rendered document, the token's by the tokenizer's offsets). At every
layer the attention from the last input position (the decision position: inputs end with the assistant
prefix and the score is read there) is averaged over heads, summed per field and normalised over the three
fields. Each pair's field token shares are the length baseline: a field that gets more attention than its
share of tokens is attended beyond its length. Prompt, instruction, query and separators are outside every
field. Outputs: the per-layer mean share per field with a ±1 s.d. band and the token-share lines (PNG+PDF),
a table by layer group (thirds of the stack) and key layers (first, middle, last), the count of pairs whose
final-layer body share exceeds their body token share, and the Pearson correlation of final-layer body
share with body length (tokens). Eager attention where the fast kernels return none (SDPA, flash).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ..data.jsonl import atomic_write_text
from ..data.types import Skill
from ..fields import TextSpec
from ..pipeline.compose import stage_model, reranker_spec, reranker_text
from ..rerank.scorers import PairScorer
from .collect import run_config, run_dataset, run_stage_entry, shown_path
from .figures import save_figure
from .render import plain_to_latex, plain_to_markdown

FIELDS = ("name", "description", "body")
SEPARATORS = " |\n"


def rendered_fields(skill: Skill, text: TextSpec) -> tuple[str, str, str]:
    """Each field's text as the reranker document shows it (caps and stripping of its style); the body is
    empty under name+description. A release's verbatim text keeps its fields uncapped."""
    caps, body = text.caps, skill.body if text.mode == "all" and text.prompt_format != "flat-nd" else ""

    def cap(s: str, n: int | None) -> str:
        return s if n is None else s[:n]

    if text.prompt_format in ("r3", "skillret") or (text.prompt_format == "qwen3" and text.style == "release"):
        return skill.name, skill.description, body
    if text.prompt_format == "qwen3" and text.style == "joined":
        return skill.name.strip(), cap(skill.description.strip(), caps.description).strip(), cap(body, caps.body).strip()
    return skill.name, cap(skill.description, caps.description), cap(body, caps.body)


def field_spans(doc: str, fields: tuple[str, str, str]) -> list[tuple[int, int]]:
    """``[start, end)`` of name, description and body in ``doc``, each searched after the previous one. A
    body that is not there verbatim (a release text whose body part is its own ``skill_md``) is the rest
    of the document after the description and the separator."""
    spans, at = [], 0
    for i, piece in enumerate(fields):
        start = doc.find(piece, at) if piece else -1
        if start < 0 and i == 2 and piece:
            start = at
            while start < len(doc) and doc[start] in SEPARATORS:
                start += 1
            spans.append((start, len(doc)))
            continue
        if start < 0:
            if piece:
                raise ValueError(f"field {FIELDS[i]!r} not found in the rendered document: {doc[:120]!r}")
            spans.append((at, at))
            continue
        spans.append((start, start + len(piece)))
        at = start + len(piece)
    return spans


def token_fields(offsets: list[tuple[int, int, int]], spans: list[tuple[int, int]]) -> list[list[int]]:
    """The input positions of each field: a document token belongs to the field its first character is in."""
    out: list[list[int]] = [[] for _ in FIELDS]
    for position, start, _end in offsets:
        for f, (a, b) in enumerate(spans):
            if a <= start < b:
                out[f].append(position)
                break
    return out


def decision_attention(model: torch.nn.Module, ids: list[int]) -> np.ndarray:
    """``[layers, positions]``: the last position's attention at each layer, averaged over heads."""
    with torch.no_grad():
        inputs = torch.tensor([ids], device=model.device)
        attentions = model(input_ids=inputs, output_attentions=True, logits_to_keep=1).attentions
        if not attentions:  # SDPA / flash kernels compute no attention matrix
            base = model.get_base_model() if hasattr(model, "get_base_model") else model
            base.set_attn_implementation("eager")
            attentions = model(input_ids=inputs, output_attentions=True, logits_to_keep=1).attentions
    return torch.stack([a[0, :, -1, :].float().mean(0) for a in attentions]).cpu().numpy()


def field_shares(attention: np.ndarray, positions: list[list[int]]) -> np.ndarray:
    """``[layers, 3]``: attention summed per field, normalised over the three fields (zeros where none is attended)."""
    summed = np.stack([attention[:, p].sum(1) if p else np.zeros(len(attention)) for p in positions], axis=1)
    total = summed.sum(1, keepdims=True)
    return np.divide(summed, total, out=np.zeros_like(summed), where=total > 0)


@dataclass(frozen=True)
class PairAttention:
    query: str
    skill: str
    shares: np.ndarray  # [layers, 3]
    tokens: np.ndarray  # [3] field token counts


def analyse(scorer: PairScorer, text: TextSpec, pairs: list[tuple[str, str, Skill]]) -> list[PairAttention]:
    """Field attention of each ``(query id, rendered query, GT skill)`` pair."""
    out = []
    scorer.eval()
    for qid, query, skill in pairs:
        doc = text.skill(skill)
        rows, offsets = scorer.causal_rows([query], [doc], offsets=True)
        positions = token_fields(offsets[0], field_spans(doc, rendered_fields(skill, text)))
        shares = field_shares(decision_attention(scorer.model, rows[0]), positions)
        out.append(PairAttention(qid, skill.id, shares, np.array([len(p) for p in positions], dtype=float)))
    return out


@dataclass(frozen=True)
class Summary:
    mean: np.ndarray        # [layers, 3]
    sd: np.ndarray          # [layers, 3]
    token_share: np.ndarray  # [3] mean over pairs
    body_above_share: int   # pairs whose final-layer body share > their body token share
    pairs: int
    body_length_r: float | None  # Pearson r of final-layer body share with body tokens


def summarise(results: list[PairAttention]) -> Summary:
    shares = np.stack([r.shares for r in results])
    tokens = np.stack([r.tokens for r in results])
    token_share = tokens / np.maximum(tokens.sum(1, keepdims=True), 1)
    final_body, body_tokens = shares[:, -1, 2], tokens[:, 2]
    defined = len(results) > 1 and final_body.std() > 0 and body_tokens.std() > 0
    return Summary(mean=shares.mean(0), sd=shares.std(0), token_share=token_share.mean(0),
                   body_above_share=int((final_body > token_share[:, 2]).sum()), pairs=len(results),
                   body_length_r=float(np.corrcoef(final_body, body_tokens)[0, 1]) if defined else None)


def layer_rows(layers: int) -> list[tuple[str, list[int]]]:
    """The table's rows: the stack in thirds (early, middle, late; a stack of under three layers has none)
    and the key layers (first, middle, last)."""
    thirds = np.array_split(np.arange(layers), 3) if layers >= 3 else []
    rows = [(f"{name} (layers {g[0] + 1}-{g[-1] + 1})" if len(g) > 1 else f"{name} (layer {g[0] + 1})", [int(i) for i in g])
            for name, g in zip(("early", "middle", "late"), thirds)]
    keys = sorted({0, layers // 2, layers - 1})
    return rows + [(f"layer {k + 1}", [k]) for k in keys]


def layer_table(summary: Summary) -> pd.DataFrame:
    rows = []
    for label, layers in layer_rows(len(summary.mean)):
        row = {"layers": label}
        for f, name in enumerate(FIELDS):
            row[f"{name} attention"] = f"{summary.mean[layers, f].mean():.3f} ± {summary.sd[layers, f].mean():.3f}"
        rows.append(row)
    rows.append({"layers": "token share (length baseline)",
                 **{f"{name} attention": f"{summary.token_share[f]:.3f}" for f, name in enumerate(FIELDS)}})
    return pd.DataFrame(rows)


def figure(summary: Summary, base: Path) -> list[Path]:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    layers = np.arange(1, len(summary.mean) + 1)
    for f, name in enumerate(FIELDS):
        line, = ax.plot(layers, summary.mean[:, f], label=f"{name} attention", linewidth=1.5)
        ax.fill_between(layers, summary.mean[:, f] - summary.sd[:, f], summary.mean[:, f] + summary.sd[:, f],
                        color=line.get_color(), alpha=0.18)
        ax.axhline(summary.token_share[f], color=line.get_color(), linestyle="--", linewidth=1, label=f"{name} token share")
    ax.set_xlabel("layer")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_ylabel("share of decision-position attention")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, frameon=False)
    fig.tight_layout()
    return save_figure(fig, base)


def yes_no_reranker(run: Path) -> bool:
    """Whether a run reranked with a causal LM judging yes/no (the runs this analysis applies to)."""
    try:
        rr = run_config(run)["reranker"]
    except (OSError, KeyError, ValueError):
        return False
    return (rr.get("base", {}) if rr.get("kind") == "trained" else rr).get("head") == "causal_lm"


def load_run(run: Path, max_pairs: int) -> tuple[PairScorer, TextSpec, list[tuple[str, str, Skill]]]:
    """The run's reranker (its fine-tuned weights from the cache where it trained one), its rendering, and
    its first ``max_pairs`` query–GT pairs in benchmark order."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(run_config(run))
    if not yes_no_reranker(run):
        raise ValueError(f"{run}: field attention needs a yes/no LM reranker (head causal_lm); this run's is "
                         f"{cfg.reranker.name} ({stage_model(cfg.reranker).get('head', cfg.reranker.kind)})")
    spec = reranker_spec(stage_model(cfg.reranker))
    if cfg.fields.mode == "oracle_nd":
        raise ValueError(f"{run}: fields=oracle_nd replaces descriptions; run the analysis on a nd or all cell")
    model = str(run_stage_entry(run, "train_reranker") / "model") if cfg.reranker.kind == "trained" else None
    text = reranker_text(cfg)
    dataset = run_dataset(run)
    skills = {s.id: s for s in dataset.skills}
    pairs = [(q.id, text.query(q.text), skills[g]) for q in dataset.queries for g in q.gt if g in skills]
    return PairScorer(spec, model_path=model), text, pairs[:max_pairs]


def write_attention(run: Path, out: Path, name: str, max_pairs: int = 200) -> list[Path]:
    """``<out>/<name>.{md,tex,png,pdf}``."""
    scorer, text, pairs = load_run(run, max_pairs)
    if not pairs:
        raise ValueError(f"{run}: no query has a GT skill in the pool")
    summary = summarise(analyse(scorer, text, pairs))
    r = "n/a (fewer than two pairs or no spread)" if summary.body_length_r is None else f"{summary.body_length_r:.3f}"
    notes = [f"run: {shown_path(run)}; {summary.pairs} query-GT pairs; reranker prompt {text.prompt_format}, fields {text.mode}.",
             "Share of the decision position's attention (head mean) per field, normalised over name, description "
             "and body; mean ± s.d. over pairs; the last row is the fields' share of tokens (the length baseline).",
             f"Pairs whose final-layer body share exceeds their body token share: {summary.body_above_share} of {summary.pairs}.",
             f"Pearson r of final-layer body share with body length (tokens): {r}."]
    table = layer_table(summary)
    title = f"Field attention by layer: {name}"
    md, tex = out / f"{name}.md", out / f"{name}.tex"
    atomic_write_text(md, f"# Field attention: {name}\n\n" + plain_to_markdown(table, title, notes) +
                      f"\n![field attention]({name}.png)\n")
    atomic_write_text(tex, plain_to_latex(table, f"attention-{name}", title, notes))
    return [md, tex, *figure(summary, out / name)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m skillrouter.report.attention", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="run directory of a cell with a yes/no LM reranker")
    parser.add_argument("--max-pairs", type=int, default=200, help="query-GT pairs analysed, in benchmark order")
    parser.add_argument("--out", type=Path, default=Path("reports/attention"))
    parser.add_argument("--name", default=None, help="file name (default: the run directory's name)")
    args = parser.parse_args(argv)
    for path in write_attention(args.run, args.out, args.name or args.run.name, args.max_pairs):
        print(path)


if __name__ == "__main__":
    main()
