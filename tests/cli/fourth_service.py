"""A fourth service's profile file, as a user writes one (timing only: default request and handler),
for the CLI tests that run a service off the paper's three."""

ASR = """\
services:
  asr:
    capacity: 1
    queue_limit: 11
    proc_time_ms: [150, 250]
    startup_ms: 5000
    slo_ms: 800
    units: 1
    initial_replicas: 1
"""
