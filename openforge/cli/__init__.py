"""The `forge` command line: thin typer commands over the library, one module per command group."""
