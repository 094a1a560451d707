"""Helpers the tests share (tests/conftest.py keeps only fixtures and pytest's hooks)."""
