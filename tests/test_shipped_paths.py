"""No shipped file names a folder of the machine it was made on: commands in models/manifest.json,
the model files' own manifests (testbed.json inside each zip) and docs/ rerun anywhere.

The rule: an absolute path under a per-machine root (a user's home, the build machine's /work,
scratch and temporary folders) is a build-machine path. System and deployment paths the harness
itself defines are not (/run/testbed, /etc/..., /usr/..., /proc, /dev, /opt/testbed that the
playbooks create on lab servers). Exceptions are listed in ALLOWED with their reason (none today:
the chatbot image now bakes its model in instead of mounting a folder). This file names the
roots by design and is not scanned."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest

from testbed.train.command import rerunnable_command

ROOT = Path(__file__).resolve().parents[1]
MACHINE_ROOTS = ("work", "tmp", "home", "root", "Users", "mnt", "scratch", "var/tmp")
BUILD_PATH = re.compile(r"(?<![\w.~/-])/(?:" + "|".join(MACHINE_ROOTS) + r")(?![\w.-])[^\s\"'`),;\]}]*")
ALLOWED: set[tuple[str, str]] = set()  # (file, path), each with a comment saying why
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()
TEXT_MEMBERS = (".json", ".txt", ".yaml", ".yml", ".md")


def build_paths(name: str, text: str) -> list[str]:
    """`name: path` for each build-machine path in `text` that ALLOWED does not list."""
    return [f"{name}: {m}" for m in BUILD_PATH.findall(text) if (name, m) not in ALLOWED]


def shipped_texts() -> list[tuple[str, str]]:
    """(name, text) of every git-tracked text file, and of the text members of tracked zips."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True,
                           check=True).stdout.decode().split("\0")
    out = []
    for name in filter(None, files):
        if name == SELF:
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        if name.endswith(".zip"):
            with zipfile.ZipFile(path) as zf:
                out += [(f"{name}!{m}", zf.read(m).decode("utf-8", "replace"))
                        for m in zf.namelist() if m.endswith(TEXT_MEMBERS)]
            continue
        data = path.read_bytes()
        if b"\0" not in data:  # binary files (plots) hold no commands
            out.append((name, data.decode("utf-8", "replace")))
    return out


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs a git checkout to know which files are shipped")
def test_no_shipped_file_names_a_build_machine_path():
    texts = shipped_texts()
    names = {n for n, _ in texts}
    # the scan reaches the files that held such paths
    assert {"models/manifest.json", "models/ddpg.zip!testbed.json", "docs/sim.md"} <= names
    assert [p for name, text in texts for p in build_paths(name, text)] == []


def test_the_rule_flags_machine_folders_and_leaves_system_paths():
    work, tmp, home = "/" + "work/shared/traces", "/" + "tmp/try/ddpg.zip", "/" + "home/u/x"
    text = f"--traces {work} --out {tmp} and {home}; `/run/testbed/main.json`, /etc/hosts, " \
           "/opt/testbed/venv, https://example.org/tmp/x, /workloads/x, runs/tmp/y"
    assert build_paths("doc.md", text) == [f"doc.md: {work}", f"doc.md: {tmp}", f"doc.md: {home}"]
    ollama = "/" + "root/.ollama"
    assert build_paths("other.yaml", f"mountPath: {ollama}") == [f"other.yaml: {ollama}"]


def test_recorded_training_commands_rerun_from_the_repository(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "models").mkdir(parents=True)
    traces, scratch = tmp_path / "shared" / "traces", Path("/" + "tmp") / "try"
    cmd = (f"testbed train --policy ddpg --traces {traces} --steps 30000 --out {scratch}/ddpg.zip "
           f"--init-from={repo}/models/ddpg.zip --partners models")
    assert rerunnable_command(cmd, repo, cwd=repo) == (
        "testbed train --policy ddpg --traces ../shared/traces --steps 30000 --out OUT "
        "--init-from=models/ddpg.zip --partners models")
    # relative paths as typed in another folder of the repository
    assert rerunnable_command("testbed train x --init-from ../models/x.zip", repo,
                              cwd=repo / "models") == "testbed train x --init-from models/x.zip"


def test_a_clone_in_the_temporary_directory_has_no_neighbours(tmp_path: Path, monkeypatch):
    """A clone at /tmp/clone: a pytest scratch folder /tmp/pytest-of-root/... is no folder "beside
    the repository" that another machine has (a fresh clone in /tmp recorded ../pytest-of-root/...)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    repo, scratch = tmp_path / "clone", tmp_path / "pytest-of-root" / "elsewhere"
    repo.mkdir()
    assert rerunnable_command(f"testbed train --out {scratch}/ddpg.zip --init-from {repo}/m.zip",
                              repo, cwd=repo) == "testbed train --out OUT --init-from m.zip"
