"""Data-plane commands: up, down, status, exec, traffic, demo."""

from testbed.cli import app  # noqa: F401
