"""runner: a git-native task queue."""

__version__ = "0.1.0"
