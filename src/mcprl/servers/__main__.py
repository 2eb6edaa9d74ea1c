"""`python -m mcprl.servers NAME [options]`: the same as `mcprl servers serve NAME [options]`."""

import sys

from mcprl.cli.servers import app

app(args=["serve", *sys.argv[1:]], prog_name="python -m mcprl.servers")
