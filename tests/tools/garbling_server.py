"""A hand-written stdio MCP server that answers initialize and tools/list properly, then replies to every
tools/call with a broken reply: what a broken server does, which the SDK's servers cannot. The tool says
how: `garble` sends a line that is not JSON, `null_result` a response whose result is null, `wrong_id`
a well-formed result for a request id that was never sent."""

import json
import sys

TOOLS = [{"name": name, "description": "Replies brokenly.", "inputSchema": {"type": "object"}}
         for name in ("garble", "null_result", "wrong_id")]

for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        continue  # a notification
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "garbling", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif message["params"]["name"] == "garble":
        sys.stdout.write("{this is not json-rpc\n")
        sys.stdout.flush()
        continue
    elif message["params"]["name"] == "null_result":
        result = None
    else:
        request_id, result = 10_000 + request_id, {"content": [{"type": "text", "text": "for nobody"}]}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()
