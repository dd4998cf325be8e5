"""The front ends of a served router: MCP (the official ``mcp`` SDK: stdio, the way Claude Code and Codex start a
local server, or streamable HTTP at ``/mcp``) with tools ``find_skills`` and ``read_skill``, and a JSON API for
scripts (``POST /route``, ``GET /skills/{id}``, ``GET /health``, ``GET /metrics``, ``GET /openapi.json``) on the
same HTTP app.

Safety: the HTTP app binds 127.0.0.1 unless told otherwise; with a token every request but ``/health`` needs
``Authorization: Bearer <token>``; ``read_skill`` serves only ids in the index; a body of any shape the API does
not take (over the size caps, nested deeper than a request ever is, a field of the wrong type) gets a 4xx with one
line saying what is wrong (``tests/test_route.py`` fuzzes the API from its own ``/openapi.json`` with schemathesis).
``/metrics`` is Prometheus' text format (``prometheus-client``): requests, model calls, request latency, index size,
skills embedded, files that failed to parse, answers from the cache."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import MCPServer
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from mcp.server.mcpserver.exceptions import ToolError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from .batching import MicroBatcher
from .router import Router

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """What one request may ask: tasks per request, characters per task, bytes per body, skills per task."""

    max_tasks: int = 64
    max_task_chars: int = 20_000
    max_body_bytes: int = 1_000_000
    max_k: int = 50
    max_depth: int = 8  # JSON nesting (a request is an object holding a list of strings: 2 levels)


class BadRequest(ValueError):
    """A request the server refuses (the message is the one line the client gets)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def nesting(body: bytes) -> int:
    """How deep the JSON in ``body`` nests (brackets inside strings not counted): measured before parsing, so a
    body of 100,000 brackets is refused in one pass instead of exhausting the parser's recursion."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def check_request(tasks: Any, k: Any, limits: Limits) -> tuple[list[str], int]:
    """``(tasks, k)`` validated against the caps, else :class:`BadRequest`."""
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise BadRequest("'task' must be a non-empty string (or 'tasks' a non-empty list of them)")
    if len(tasks) > limits.max_tasks:
        raise BadRequest(f"{len(tasks)} tasks in one request; at most {limits.max_tasks}", 413)
    longest = max(len(t) for t in tasks)
    if longest > limits.max_task_chars:
        raise BadRequest(f"a task of {longest} characters; at most {limits.max_task_chars}", 413)
    if isinstance(k, float) and k.is_integer():  # JSON's 4.0 is the integer 4 (JSON Schema says so)
        k = int(k)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limits.max_k:
        raise BadRequest(f"'k' must be an integer from 1 to {limits.max_k} (the cell's retrieve_k), got {k!r}")
    return tasks, k


def openapi(limits: Limits) -> dict[str, Any]:
    """The JSON API's schema, its limits included (schemathesis fuzzes the server against it)."""
    task = {"type": "string", "minLength": 1, "maxLength": limits.max_task_chars, "pattern": "\\S"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "skillrouter route", "version": "1"},
        "paths": {
            "/route": {"post": {
                "summary": "Rank the pool's skills for one task or a batch",
                "requestBody": {"required": True, "content": {"application/json": {"schema": {
                    "type": "object",
                    "properties": {"task": task, "tasks": {"type": "array", "items": task, "minItems": 1,
                                                           "maxItems": limits.max_tasks},
                                   "k": {"type": "integer", "minimum": 1, "maximum": limits.max_k, "default": 5}},
                    "oneOf": [{"required": ["task"]}, {"required": ["tasks"]}]}}}},
                "responses": {"200": {"description": "'hits' for 'task', 'results' (a list of hit lists) for 'tasks'",
                                      "content": {"application/json": {"schema": {"type": "object", "properties": {
                                          "hits": {"$ref": "#/components/schemas/Hits"},
                                          "results": {"type": "array", "items": {"$ref": "#/components/schemas/Hits"}}}}}}},
                              "400": {"description": "a bad field"}, "401": {"description": "missing or wrong token"},
                              "413": {"description": "over the request caps"}}}},
            "/skills/{id}": {"get": {
                "summary": "The full SKILL.md of a skill in the index",
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": {"description": "SKILL.md", "content": {"text/markdown": {}}},
                              "401": {"description": "missing or wrong token"},
                              "404": {"description": "no such id in the index"}}}},
            "/health": {"get": {"summary": "What is loaded, the cell's measured metrics, counters",
                                "responses": {"200": {"description": "status", "content": {"application/json": {
                                    "schema": {"type": "object", "required": ["status"]}}}}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics: requests, model calls, latency, index size",
                                 "responses": {"200": {"description": "Prometheus' text exposition format",
                                                       "content": {"text/plain": {"schema": {"type": "string"}}}},
                                               "401": {"description": "missing or wrong token"}}}},
        },
        "components": {"schemas": {"Hits": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string"},
            "score": {"type": "number"}, "encoder_rank": {"type": "integer"}}}}}},
    }


class BearerAuth:
    """ASGI middleware: every HTTP request but ``/health`` carries ``Authorization: Bearer <token>``."""

    def __init__(self, app, token: str):
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] != "/health" \
                and dict(scope["headers"]).get(b"authorization") != self.expected:
            await PlainTextResponse("missing or wrong bearer token\n", 401)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class RouteServer:
    """The MCP server and the JSON API around one :class:`Router` and its :class:`MicroBatcher`."""

    def __init__(self, router: Router, batcher: MicroBatcher, limits: Limits, measured: dict[str, Any] | None):
        self.router, self.batcher, self.limits, self.measured = router, batcher, limits, measured
        self.requests = 0
        self.registry = CollectorRegistry()  # this server's alone (two servers in one process never share counters)
        self.counted = Counter("skillrouter_route_requests", "Routing requests answered, by front end", ["api"],
                               registry=self.registry)
        self.latency = Histogram("skillrouter_route_request_seconds", "Time to answer a routing request", ["api"],
                                 buckets=(0.05, 0.1, 0.2, 0.3, 0.5, 1, 2, 5, 10, 30), registry=self.registry)
        self.gauges = {name: Gauge(f"skillrouter_route_{name}", text, registry=self.registry) for name, text in (
            ("batches", "Model calls (micro-batches of requests) made"),
            ("index_skills", "Skills in the index served"),
            ("skills_embedded", "Skills embedded since start (a watched folder's new or changed skills)"),
            ("parse_failures", "SKILL.md files of a watched folder that failed to parse"),
            ("cache_hits", "Tasks answered from the cache of answers"))}
        self.mcp = MCPServer("skillrouter", instructions=self._instructions())
        self.mcp.tool(description="Find the agent skills that help with a task, best first: id, name, description, "
                                  "score and the rank the first-stage encoder gave it. Read one with read_skill.")(
            self.find_skills)
        self.mcp.tool(description="The full SKILL.md of a skill returned by find_skills (by its id).")(self.read_skill)
        for path, methods, handler in (("/route", ["POST"], self.http_route), ("/skills/{id:path}", ["GET"], self.http_skill),
                                       ("/health", ["GET"], self.http_health), ("/metrics", ["GET"], self.http_metrics),
                                       ("/openapi.json", ["GET"], self.http_openapi)):
            self.mcp.custom_route(path, methods)(handler)

    def _instructions(self) -> str:
        metrics = (self.measured or {}).get("metrics", {})
        shown = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if k in ("hit@1", "mrr@10", "r@10"))
        return (f"Routes tasks to agent skills in a pool of {len(self.router.snapshot.ids)}."
                + (f" Measured on its benchmark: {shown}." if shown else ""))

    async def _route(self, api: str, tasks: list[str], k: int) -> list[list[dict[str, Any]]]:
        t0 = time.perf_counter()
        hits = await self.batcher.route(tasks, k)
        self.requests += 1
        self.counted.labels(api).inc()
        self.latency.labels(api).observe(time.perf_counter() - t0)
        return [[h.to_json() for h in task_hits] for task_hits in hits]

    async def find_skills(self, task: str, k: int = 5) -> list[dict[str, Any]]:
        try:
            tasks, k = check_request([task], k, self.limits)
        except BadRequest as exc:
            raise ToolError(str(exc)) from None
        return (await self._route("mcp", tasks, k))[0]

    def read_skill(self, id: str) -> str:  # noqa: A002 - the tool's argument name is part of its schema
        text = self.router.read_skill(id)
        if text is None:
            raise ToolError(f"no skill with id {id!r} in the index (ids come from find_skills)")
        return text

    async def http_route(self, request: Request) -> Response:
        try:
            body = await request.body()
            if len(body) > self.limits.max_body_bytes:
                raise BadRequest(f"request body of {len(body)} bytes; at most {self.limits.max_body_bytes}", 413)
            depth = nesting(body)
            if depth > self.limits.max_depth:
                raise BadRequest(f"body nests {depth} levels deep; a request nests at most {self.limits.max_depth}")
            try:
                payload = json.loads(body)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                where = f" ({exc.msg} at line {exc.lineno} column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else ""
                raise BadRequest(f"body is not JSON{where}") from None
            if not isinstance(payload, dict) or ("task" in payload) == ("tasks" in payload):
                raise BadRequest("body must be a JSON object with 'task' (a string) or 'tasks' (a list of strings)")
            single = "task" in payload
            tasks, k = check_request([payload["task"]] if single else payload["tasks"], payload.get("k", 5), self.limits)
        except BadRequest as exc:
            return PlainTextResponse(f"{exc}\n", exc.status)
        results = await self._route("http", tasks, k)
        return JSONResponse({"hits": results[0]} if single else {"results": results})

    async def http_skill(self, request: Request) -> Response:
        text = self.router.read_skill(request.path_params["id"])
        if text is None:
            return PlainTextResponse("no skill with this id in the index\n", 404)
        return PlainTextResponse(text, media_type="text/markdown")

    async def http_health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", **self.router.describe(), "requests": self.requests,
                             "batches": self.batcher.batches, "measured": (self.measured or {}).get("metrics")})

    async def http_metrics(self, request: Request) -> Response:
        described = self.router.describe()
        values = {"batches": self.batcher.batches, "index_skills": described["skills"],
                  "skills_embedded": described["embedded"], "parse_failures": len(described["skipped"]),
                  "cache_hits": described["cache_hits"]}
        for name, value in values.items():
            self.gauges[name].set(value)
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

    async def http_openapi(self, request: Request) -> Response:
        return JSONResponse(openapi(self.limits))

    def http_app(self, token: str | None, host: str):
        app = self.mcp.streamable_http_app(host=host, stateless_http=True, json_response=True,
                                           max_request_body_size=self.limits.max_body_bytes)
        return BearerAuth(app, token) if token else app
