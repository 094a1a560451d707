"""Peers runner is measured against: see harness.py."""
