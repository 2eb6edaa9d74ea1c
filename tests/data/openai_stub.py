"""A real OpenAI-compatible HTTP server on 127.0.0.1 whose replies a test scripts per request."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    content: str | None = None  # the model's text; None with an error status
    status: int = 200
    error: str = ""
    delay_s: float = 0.0


Script = Callable[[str, dict[str, Any]], Reply]


def chat_payload(body: dict[str, Any], content: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()), "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content, "refusal": None}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def responses_payload(body: dict[str, Any], content: str) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "created_at": int(time.time()), "model": body["model"],
            "status": "completed", "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": content, "annotations": []}]}]}


class StubOpenAI:
    """`script(path, body)` decides each reply; every request is kept in `requests` (path, body)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.auth_headers: list[str] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                stub.requests.append((self.path, body))
                stub.auth_headers.append(self.headers.get("Authorization", ""))
                reply = stub.script(self.path, body)
                time.sleep(reply.delay_s)
                if reply.status != 200:
                    payload = {"error": {"message": reply.error, "type": "invalid_request_error", "code": None}}
                elif self.path.endswith("/responses"):
                    payload = responses_payload(body, reply.content or "")
                else:
                    payload = chat_payload(body, reply.content or "")
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StubOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
