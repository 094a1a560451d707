"""Helpers the tests share (tests/conftest.py keeps only fixtures and pytest's hooks).

Imported before any helper, so every process a test starts inherits it: `python3` is this
interpreter (a pyenv shim spends a dozen shell processes to find it), and runner's bytecode is
kept (with PYTHONDONTWRITEBYTECODE, as container images often set it, every one of the suite's
few thousand runner processes compiled runner again: a third of its CPU)."""

import os
import sys
from pathlib import Path

os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
