"""The SkillRouter recall figure: R@K for K = 1..50 per encoder, Easy and Hard panels, a star at
each pipeline's Hit@1. PNG and PDF, written without timestamps so reruns are byte-identical."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from .collect import recall_curve, usable
from .tables import TIER_VALUES, _order, system_label


def recall_figure(runs: pd.DataFrame, run_root: Path, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = usable(runs)
    df = df[df["fields"] == "all"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, tier in zip(axes, TIER_VALUES):
        tier_runs = df[df["tier"] == tier]
        encoders = tier_runs[tier_runs["reranker"] == "none"]
        for enc in _order(list(encoders["encoder"])):
            curve = recall_curve(run_root, encoders[encoders["encoder"] == enc].iloc[-1]["run"])
            if curve:
                ax.plot(range(1, len(curve) + 1), curve, label=enc, linewidth=1.4)
        pipelines = tier_runs[(tier_runs["reranker"] != "none") & (tier_runs["topk"] == "20")]
        stars = {system_label(run): run["hit@1"] for _, run in pipelines.iterrows()}  # one per system
        for label in _order(list(stars)):
            ax.plot([1], [stars[label]], marker="*", markersize=11, linestyle="none", label=label)
        ax.set_title(f"{tier.capitalize()} tier")
        ax.set_xlabel("K")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Recall@K")
    handles, labels = axes[0].get_legend_handles_labels()
    for h, lab in zip(*axes[1].get_legend_handles_labels()):
        if lab not in labels:
            handles.append(h)
            labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(4, max(1, len(labels))), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return save_figure(fig, out_dir / "recall_at_k")


def save_figure(fig, base: Path) -> list[Path]:
    """``base``.png and .pdf without timestamps (reruns are byte-identical); closes the figure."""
    import matplotlib.pyplot as plt

    base.parent.mkdir(parents=True, exist_ok=True)
    paths = [base.parent / f"{base.name}.png", base.parent / f"{base.name}.pdf"]
    fig.savefig(paths[0], dpi=150, metadata={"Software": None})
    fig.savefig(paths[1], metadata={"CreationDate": None, "Creator": None, "Producer": None})
    plt.close(fig)
    return paths
