"""testbed: an end-to-end 5G testbed harness for AI-native services."""

__version__ = "0.1.0"
