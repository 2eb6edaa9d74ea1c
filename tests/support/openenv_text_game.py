"""A small OpenEnv environment without MCP tools, speaking OpenEnv's wire protocol (as openenv 0.10.0's
server does for a text game): reset(word) sets the word, the action is {"guess": text}, reward 1 ends it."""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

ACTION = {"type": "object", "properties": {"metadata": {"type": "object"}, "guess": {"type": "string"}},
          "required": ["guess"]}


def text_game() -> Starlette:
    async def schema(_):
        return JSONResponse({"action": ACTION, "observation": {"type": "object"}, "state": {"type": "object"}})

    async def session(ws: WebSocket) -> None:
        await ws.accept()
        word, steps = "", 0
        try:
            while True:
                message = json.loads(await ws.receive_text())
                kind, data = message.get("type"), message.get("data") or {}
                if kind == "close":
                    break
                if kind == "reset":
                    word, steps = str(data.get("word", "pear")), 0
                    reply = {"observation": {"prompt": f"Guess the word; it has {len(word)} letters.", "metadata": {}},
                             "reward": None, "done": False}
                elif kind == "step" and "guess" in data:
                    steps += 1
                    right = data["guess"].strip().lower() == word
                    reply = {"observation": {"prompt": "right" if right else "wrong, guess again", "metadata": {}},
                             "reward": 1.0 if right else 0.0, "done": right}
                else:
                    await ws.send_text(json.dumps({"type": "error", "data": {"message": "Invalid message",
                                                                             "code": "VALIDATION_ERROR"}}))
                    continue
                await ws.send_text(json.dumps({"type": "observation", "data": reply}))
        except WebSocketDisconnect:
            pass

    return Starlette(routes=[Route("/schema", schema), WebSocketRoute("/ws", session)])
