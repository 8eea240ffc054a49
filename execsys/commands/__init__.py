"""One module per ``execsys`` subcommand: argument wiring and rendering only; logic lives elsewhere."""
