#!/usr/bin/env python
"""Score one turn with the LLM judge: `python scripts/try_llm_judge.py [--data FILE] [--model M]`.

A thin wrapper over `mcprl judge try`; the endpoint comes from OPENAI_BASE_URL / OPENAI_API_KEY.
"""

import sys

from mcprl.cli.main import app

if __name__ == "__main__":
    sys.exit(app(["judge", "try", *sys.argv[1:]]))
