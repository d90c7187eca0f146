"""The pattern of a testbed's name (the prefix of its namespaces, state file and processes), apart
from the specs so that the state files' names are checked without building the pydantic models."""

NAME_PATTERN = r"^[a-z][a-z0-9]{0,11}$"
