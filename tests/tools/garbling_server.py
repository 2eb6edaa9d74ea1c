"""A hand-written stdio MCP server that answers initialize and tools/list properly, then replies to every
tools/call with a line that is not JSON-RPC: what a broken server does, which the SDK's servers cannot."""

import json
import sys

TOOL = {"name": "garble", "description": "Replies with a broken line.", "inputSchema": {"type": "object"}}

for line in sys.stdin:
    message = json.loads(line)
    method, request_id = message.get("method"), message.get("id")
    if request_id is None:
        continue  # a notification
    if method == "initialize":
        result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                  "serverInfo": {"name": "garbling", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    else:
        sys.stdout.write("{this is not json-rpc\n")
        sys.stdout.flush()
        continue
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()
