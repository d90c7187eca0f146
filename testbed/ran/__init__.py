"""UERANSIM (v3.3.0): gNB and UE config rendering, launching UEs, waiting for their PDU sessions."""

from testbed.ran.render import render_ueransim, ueransim_files
from testbed.ran.ue import UEStatus, ue_status, ue_up

__all__ = ["UEStatus", "render_ueransim", "ue_status", "ue_up", "ueransim_files"]
