"""The front ends of a served router: MCP (the official ``mcp`` SDK: stdio, the way Claude Code and Codex start a
local server, or streamable HTTP at ``/mcp``) with tools ``find_skills`` and ``read_skill``, and a JSON API for
scripts (``POST /route``, ``GET /skills/{id}``, ``GET /health``, ``GET /openapi.json``) on the same HTTP app.

Safety: the HTTP app binds 127.0.0.1 unless told otherwise; with a token every request but ``/health`` needs
``Authorization: Bearer <token>``; ``read_skill`` serves only ids in the index; a request over the size caps or
with a bad field gets a 4xx with one line saying what is wrong."""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import MCPServer
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


class BadRequest(ValueError):
    """A request the server refuses (the message is the one line the client gets)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def check_request(tasks: Any, k: Any, limits: Limits) -> tuple[list[str], int]:
    """``(tasks, k)`` validated against the caps, else :class:`BadRequest`."""
    if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
        raise BadRequest("'task' must be a non-empty string (or 'tasks' a non-empty list of them)")
    if len(tasks) > limits.max_tasks:
        raise BadRequest(f"{len(tasks)} tasks in one request; at most {limits.max_tasks}", 413)
    longest = max(len(t) for t in tasks)
    if longest > limits.max_task_chars:
        raise BadRequest(f"a task of {longest} characters; at most {limits.max_task_chars}", 413)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limits.max_k:
        raise BadRequest(f"'k' must be an integer from 1 to {limits.max_k} (the cell's retrieve_k), got {k!r}")
    return tasks, k


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "skillrouter route", "version": "1"},
    "paths": {
        "/route": {"post": {
            "summary": "Rank the pool's skills for one task or a batch",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {
                "type": "object",
                "properties": {"task": {"type": "string"}, "tasks": {"type": "array", "items": {"type": "string"}},
                               "k": {"type": "integer", "minimum": 1, "default": 5}},
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
                          "404": {"description": "no such id in the index"}}}},
        "/health": {"get": {"summary": "What is loaded, the cell's measured metrics, counters",
                            "responses": {"200": {"description": "status"}}}},
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
        self.mcp = MCPServer("skillrouter", instructions=self._instructions())
        self.mcp.tool(description="Find the agent skills that help with a task, best first: id, name, description, "
                                  "score and the rank the first-stage encoder gave it. Read one with read_skill.")(
            self.find_skills)
        self.mcp.tool(description="The full SKILL.md of a skill returned by find_skills (by its id).")(self.read_skill)
        for path, methods, handler in (("/route", ["POST"], self.http_route), ("/skills/{id:path}", ["GET"], self.http_skill),
                                       ("/health", ["GET"], self.http_health), ("/openapi.json", ["GET"], self.http_openapi)):
            self.mcp.custom_route(path, methods)(handler)

    def _instructions(self) -> str:
        metrics = (self.measured or {}).get("metrics", {})
        shown = ", ".join(f"{k} {v:.3f}" for k, v in metrics.items() if k in ("hit@1", "mrr@10", "r@10"))
        return (f"Routes tasks to agent skills in a pool of {len(self.router.snapshot.ids)}."
                + (f" Measured on its benchmark: {shown}." if shown else ""))

    async def find_skills(self, task: str, k: int = 5) -> list[dict[str, Any]]:
        try:
            tasks, k = check_request([task], k, self.limits)
        except BadRequest as exc:
            raise ToolError(str(exc)) from None
        self.requests += 1
        return [h.to_json() for h in (await self.batcher.route(tasks, k))[0]]

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
            try:
                payload = json.loads(body)
            except json.JSONDecodeError as exc:
                raise BadRequest(f"body is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
            if not isinstance(payload, dict) or ("task" in payload) == ("tasks" in payload):
                raise BadRequest("body must be a JSON object with 'task' (a string) or 'tasks' (a list of strings)")
            single = "task" in payload
            tasks, k = check_request([payload["task"]] if single else payload["tasks"], payload.get("k", 5), self.limits)
        except BadRequest as exc:
            return PlainTextResponse(f"{exc}\n", exc.status)
        self.requests += 1
        results = [[h.to_json() for h in hits] for hits in await self.batcher.route(tasks, k)]
        return JSONResponse({"hits": results[0]} if single else {"results": results})

    async def http_skill(self, request: Request) -> Response:
        text = self.router.read_skill(request.path_params["id"])
        if text is None:
            return PlainTextResponse("no skill with this id in the index\n", 404)
        return PlainTextResponse(text, media_type="text/markdown")

    async def http_health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", **self.router.describe(), "requests": self.requests,
                             "batches": self.batcher.batches, "measured": (self.measured or {}).get("metrics")})

    async def http_openapi(self, request: Request) -> Response:
        return JSONResponse(OPENAPI)

    def http_app(self, token: str | None, host: str):
        app = self.mcp.streamable_http_app(host=host, stateless_http=True, json_response=True,
                                           max_request_body_size=self.limits.max_body_bytes)
        return BearerAuth(app, token) if token else app
