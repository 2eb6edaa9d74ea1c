"""`python -m mcprl.cli ...`: the `mcprl` command."""

from mcprl.cli.main import main

main()
