"""Bringing a testbed up and down: the local profile's store, UEs and data plane in order."""
