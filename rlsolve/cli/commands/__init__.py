"""Sub-commands that live in their own modules (export, validate, serve, compare, cases ...).

Each module here defines `COMMANDS`, a list of click commands; `rlsolve.cli.main` registers
them all (registry.py). Modules import their heavy dependencies inside the command functions, so
`rlsolve --help` stays fast and works without the optional extras."""
