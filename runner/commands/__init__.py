"""The command line's commands, one module per group: plain functions that take parsed
options, call the library and render the answer. runner/cli.py only builds the app."""
