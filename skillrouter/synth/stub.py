"""A small OpenAI-compatible server for tests, the demo and the command line (``llm=stub``).

It answers ``/v1/chat/completions`` with deterministic JSON that is valid against the request's
``response_format`` schema, written from the prompt's data blocks (``<description>``, ``<body>``, ...;
never the ``<name>`` block, so a generated query does not leak the skill's name), and ``/v1/models``.
A terminal agent's turn (a prompt asking for ``keystrokes`` and ``task_complete``, Terminus-2's protocol) gets
one command and ``task_complete: true``, so an agent trial on the stub ends at once (the wiring, not a solution); an
LLM judge's prompt (numbered ``<skill n=...>`` candidates) gets one of their numbers, chosen by the prompt's hash.
On demand it misbehaves, every N-th request: a timeout, a 429, a 500, or malformed JSON, so the
client's retries are exercised through real HTTP.

    python -m skillrouter.synth.stub [--port 0] [--port-file F] [--timeout-every N] [--rate-limit-every N]
                                     [--server-error-every N] [--malformed-every N] [--delay S]
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

WORD = re.compile(r"[A-Za-z][A-Za-z0-9+#.-]{2,}")
BLOCK = re.compile(r"<(\w+)[^>]*>\n(.*?)\n</\1>", re.S)
AGENT_TURN = re.compile(r'"keystrokes".*"task_complete"|"task_complete".*"keystrokes"', re.S)
CANDIDATE = re.compile(r'<skill n="(\d+)"')  # an LLM judge's numbered candidates (skillrouter.rerank.llm_judge)
STOP = frozenset("the and for with that this from into your you are will can use when not all any only its".split())


def _seed(*parts: str) -> int:
    return int(hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12], 16)


def _text(content) -> str:
    """A message's text: a string, or the text parts of an OpenAI content list."""
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def words_of(prompt: str) -> list[str]:
    """Content words of the prompt's data blocks, the name block and the name's own words excluded."""
    blocks = BLOCK.findall(prompt)
    names = [v.strip().lower() for k, v in blocks if k == "name" and v.strip()]
    text = " ".join(v for k, v in blocks if k != "name") or prompt
    return [w for w in WORD.findall(text)
            if w.lower() not in STOP and not any(n in w.lower() or w.lower() in n for n in names)] or ["task"]


def fake(schema: dict[str, Any], words: list[str], seed: int, path: str = "") -> Any:
    """A value valid against ``schema`` (the subset our stages use), deterministic in ``seed``."""
    kind = schema.get("type")
    if "enum" in schema:
        return schema["enum"][seed % len(schema["enum"])]
    if kind == "object":
        return {k: fake(v, words, _seed(str(seed), k), f"{path}.{k}") for k, v in schema.get("properties", {}).items()}
    if kind == "array":
        n = max(schema.get("minItems", 1), min(schema.get("maxItems", 3), 3))
        return [fake(schema["items"], words, _seed(str(seed), str(i)), f"{path}[{i}]") for i in range(n)]
    if kind == "boolean":
        return seed % 5 == 0
    if kind == "integer":
        return schema.get("minimum", 0) + seed % 3
    lo = schema.get("x-min-words", 8)
    hi = max(lo, schema.get("x-max-words", 16))
    n = lo + seed % (hi - lo + 1)
    start = seed % len(words)
    text = " ".join(itertools.islice(itertools.cycle(words[start:] + words[:start]), n))
    return text[: schema.get("maxLength", len(text))] if len(text) >= schema.get("minLength", 0) else text.ljust(schema["minLength"], ".")


class StubState:
    def __init__(self, timeout_every: int = 0, rate_limit_every: int = 0, server_error_every: int = 0,
                 malformed_every: int = 0, delay: float = 0.0, timeout_sleep: float = 5.0):
        self.every = {"timeout": timeout_every, "429": rate_limit_every, "500": server_error_every,
                      "malformed": malformed_every}
        self.delay, self.timeout_sleep = delay, timeout_sleep
        self.count = 0
        self.lock = threading.Lock()
        self.served: dict[str, int] = {"ok": 0, "timeout": 0, "429": 0, "500": 0, "malformed": 0}

    def fault(self) -> str | None:
        with self.lock:
            self.count += 1
            for name, n in self.every.items():
                if n and self.count % n == 0:
                    self.served[name] += 1
                    return name
            self.served["ok"] += 1
            return None


def make_handler(state: StubState):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, payload: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self):  # noqa: N802
            if self.path.rstrip("/").endswith("/models"):
                self._send(200, json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode())
            else:
                self._send(404, b"{}")

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            fault = state.fault()
            if state.delay:
                time.sleep(state.delay)
            if fault == "timeout":
                time.sleep(state.timeout_sleep)
            if fault in ("429", "500"):
                return self._send(int(fault), json.dumps({"error": {"message": f"stub {fault}"}}).encode())
            prompt = "\n".join(_text(m.get("content", "")) for m in body.get("messages", []))
            spec = (body.get("response_format") or {}).get("json_schema") or {}
            numbers = CANDIDATE.findall(prompt)
            if not spec and AGENT_TURN.search(prompt):
                answer = {"analysis": "stub", "plan": "list the working folder and finish",
                          "commands": [{"keystrokes": "ls\n", "duration": 0.1}], "task_complete": True}
            elif not spec and numbers:
                answer = int(numbers[_seed(prompt) % len(numbers)])
            else:
                answer = fake(spec.get("schema", {"type": "object", "properties": {"text": {"type": "string"}}}),
                              words_of(prompt), _seed(prompt, spec.get("name", "")))
            content = json.dumps(answer)[:-3] if fault == "malformed" else json.dumps(answer)
            reply = {"id": "stub", "object": "chat.completion", "model": body.get("model", "stub"),
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(content.split())}}
            self._send(200, json.dumps(reply).encode())

        def log_message(self, *args):
            pass

    return Handler


def serve(port: int = 0, host: str = "127.0.0.1", **faults) -> ThreadingHTTPServer:
    """Start the stub in a background thread; its address is ``server.server_address``."""
    state = StubState(**faults)
    server = ThreadingHTTPServer((host, port), make_handler(state))
    server.state = state  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path)
    for name in ("timeout", "rate-limit", "server-error", "malformed"):
        parser.add_argument(f"--{name}-every", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--parent-pid", type=int, default=0, help="exit when this process is gone (a killed grid)")
    args = parser.parse_args()
    server = serve(args.port, args.host, timeout_every=args.timeout_every, rate_limit_every=args.rate_limit_every,
                   server_error_every=args.server_error_every, malformed_every=args.malformed_every, delay=args.delay)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file.with_suffix(".tmp")
        tmp.write_text(str(port))
        tmp.rename(args.port_file)
    print(f"stub LLM server on http://{args.host}:{port}/v1", flush=True)
    while not args.parent_pid or _alive(args.parent_pid):
        time.sleep(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


if __name__ == "__main__":
    main()
