"""The command line, the last layer: each module is one `mcprl` sub-command over the library below it.
`main.app` is the `mcprl` entry point; this package imports nothing, so `python -m mcprl.servers` stays lean."""
