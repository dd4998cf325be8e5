"""Serve a grid cell's router to agents, or install its top-k skills into an agent's skills folder.

    python -m skillrouter.route serve [--run RUN_DIR | OVERRIDES...] [--skills DIR] [--transport stdio|http]
    python -m skillrouter.route install --task TEXT --k N --into DIR [--run RUN_DIR | OVERRIDES...]

OVERRIDES are ``launch.py``'s (``encoder=trained reranker=trained topk=20``); the cell must be built (its stages in
the cache). Logs go to stderr: with ``--transport stdio`` stdout carries the MCP protocol and nothing else — whatever a
library prints while the server starts (transformers' W&B integration announces ``WANDB_MODE=offline`` on stdout, a
Hydra plugin may print at import) goes to stderr, and while it serves the SDK keeps stdout for the protocol."""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Iterator

from .cell import Cell, CellNotBuilt, from_overrides, from_run_dir

log = logging.getLogger("skillrouter.route")
TOKEN_ENV = "SKILLROUTER_ROUTE_TOKEN"


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("overrides", nargs="*", help="launch.py overrides naming the cell (encoder=... reranker=... topk=...)")
    common.add_argument("--run", type=Path, help="a cell's run directory (instead of overrides)")
    common.add_argument("--skills", type=Path, help="serve this SKILL.md tree (watched) instead of the cell's pool")
    common.add_argument("--watch-seconds", type=float, default=2.0, help="how often --skills is rescanned")
    parser = argparse.ArgumentParser(prog="python -m skillrouter.route", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", parents=[common], help="MCP (stdio or HTTP) and the JSON API")
    serve.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    serve.add_argument("--host", default="127.0.0.1", help="HTTP bind address (127.0.0.1 unless told otherwise)")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--token", default=os.environ.get(TOKEN_ENV),
                       help=f"HTTP bearer token (default: ${TOKEN_ENV}; unset: no token)")
    serve.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a request waits for others to batch with")
    serve.add_argument("--max-batch", type=int, default=64, help="tasks per model call at most (1: no batching)")
    serve.add_argument("--max-tasks", type=int, default=64, help="tasks per request at most")
    serve.add_argument("--max-task-chars", type=int, default=20_000, help="characters per task at most")
    install = sub.add_parser("install", parents=[common], help="write a task's top-k skills into a skills folder")
    install.add_argument("--task", required=True)
    install.add_argument("--k", type=int, default=3)
    install.add_argument("--into", type=Path, required=True, help="the agent's skills folder (e.g. .claude/skills)")
    install.add_argument("--replace", action="store_true", help="overwrite folders of the same name")
    return parser


def _cell(args: argparse.Namespace) -> Cell:
    if args.run and args.overrides:
        raise SystemExit("pass a run directory or overrides, not both")
    folder = args.skills is not None  # a live folder is the pool: only the models' weights must be built
    return from_run_dir(args.run, folder) if args.run else from_overrides(args.overrides, folder)


def _announce(cell: Cell, loaded: dict, measured: dict | None) -> None:
    source = f"run {cell.run_dir}" if cell.run_dir else f"overrides {' '.join(cell.overrides) or '(defaults)'}"
    log.info("cell: %s", source)
    if measured:
        metrics = ", ".join(f"{k}={v:.4f}" for k, v in measured["metrics"].items()
                            if isinstance(v, (int, float)) and "/" not in k)  # the headline metrics, not per stratum
        log.info("measured on %s (%s queries): %s", measured.get("choices", {}).get("data"), measured.get("n_queries"),
                 metrics)
    else:
        log.info("measured: no metrics.json of this cell found (run it with launch.py to know its accuracy)")
    log.info("loaded: %s", json.dumps(loaded))


@contextlib.contextmanager
def stdout_to_stderr(active: bool) -> Iterator[None]:
    """Inside the block, file descriptor 1 (Python's prints and C libraries' writes alike) is stderr; stdout is
    stdout again after it, for the protocol alone."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
    args = _parser().parse_args(argv)
    stdio = args.command == "serve" and args.transport == "stdio"
    with stdout_to_stderr(stdio):
        try:
            cell = _cell(args)
        except (CellNotBuilt, FileNotFoundError, ValueError) as exc:
            print(f"route: {exc}", file=sys.stderr)
            return 2
        from ..models import keep_freed_memory
        from .router import Router  # torch and the models: after the cheap checks

        keep_freed_memory()  # embedding a --skills pool at start-up page-faults less (as a stage-building process)
        router = Router(cell, args.skills)
    if args.command == "install":
        from .install import install

        try:
            placed = install(router, args.task, args.k, args.into, args.replace)
        except FileExistsError as exc:
            print(f"route: {exc}", file=sys.stderr)
            return 2
        for hit, folder in placed:
            print(f"{args.into / folder}\t{hit.id}\t{hit.score:.4f}")
        return 0
    return _serve(args, cell, router)


def _serve(args: argparse.Namespace, cell: Cell, router) -> int:
    with stdout_to_stderr(args.transport == "stdio"):
        from .batching import MicroBatcher
        from .server import Limits, RouteServer

        measured = cell.measured()
        _announce(cell, router.describe(), measured)
        if router.folder:
            router.folder.watch(args.watch_seconds)
        limits = Limits(max_tasks=args.max_tasks, max_task_chars=args.max_task_chars, max_k=router.depth)
        server = RouteServer(router, MicroBatcher(router, args.batch_wait_ms, args.max_batch), limits, measured)
    if args.transport == "stdio":
        import anyio

        anyio.run(server.mcp.run_stdio_async)  # the SDK keeps fd 1 for the protocol while it serves
        return 0
    import uvicorn

    log.info("serving http://%s:%d (MCP at /mcp, JSON API at /route, schema at /openapi.json)%s", args.host, args.port,
             " with a bearer token" if args.token else "")
    uvicorn.Server(uvicorn.Config(server.http_app(args.token, args.host), host=args.host, port=args.port,
                                  log_level="warning", timeout_graceful_shutdown=30)).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
