"""The lab profile: playbooks through ansible-runner (up, down, status) on real servers."""

from testbed.lab.bringup import LabStatus, lab_down, lab_status, lab_up
from testbed.lab.runner import PlaybookFailed, PlaybookResult, TaskFailure, run_playbook
from testbed.lab.shaping_script import shaping_script

__all__ = [
    "LabStatus",
    "PlaybookFailed",
    "PlaybookResult",
    "TaskFailure",
    "lab_down",
    "lab_status",
    "lab_up",
    "run_playbook",
    "shaping_script",
]
