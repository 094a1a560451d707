"""Git hooks: the server's check of every push (pre-receive), the client's check of plan
files (pre-commit), and installing both. Never imports the worker."""
