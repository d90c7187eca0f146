"""The UPF host's slice shaping script: same tc commands as the local profile, run for real in a netns."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from testbed.config import load_testbed
from testbed.lab.shaping_script import shaping_script
from testbed.net.shaping import Shaper


def test_script_contains_the_local_profile_commands() -> None:
    spec = load_testbed()
    text = shaping_script(spec)
    up = Shaper("X", "uplink", spec.link, tuple(spec.slices)).commands()
    assert all(" ".join(c).replace(" X ", ' "$dev" ') in text for c in up)
    assert "match ip src 10.45.0.0/24" in text and "match ip dst 10.45.0.0/24" in text
    assert "mirred egress redirect dev tbifb0" in text


Run = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def upf_host() -> Iterator[Run]:
    """A namespace with a veth `tbv0` standing for the UPF host's NIC; yields `run(*argv)`, which
    runs a command in it."""
    if os.geteuid() != 0 or shutil.which("tc") is None:
        pytest.skip("needs root and tc")
    ns = f"tb-i7s{secrets.token_hex(3)}"  # unique: parallel workers never share one

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True)

    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        run("ip", "link", "add", "tbv0", "type", "veth", "peer", "name", "tbv1")
        run("ip", "link", "set", "tbv0", "up")
        yield run
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _start(run: Run, script: Path) -> None:
    first = run("sh", str(script), "start", "tbv0")
    if first.returncode != 0 and ("ifb" in first.stderr or "Unknown" in first.stderr):
        pytest.skip(f"kernel lacks ifb/mirred: {first.stderr.strip()}")
    assert first.returncode == 0, first.stderr


@pytest.mark.needs_root
def test_start_is_idempotent_and_stop_cleans(tmp_path: Path, upf_host: Run) -> None:
    run = upf_host
    script = tmp_path / "shape.sh"
    script.write_text(shaping_script(load_testbed()))
    _start(run, script)
    assert run("sh", str(script), "start", "tbv0").returncode == 0  # again: no "exists" errors
    classes = run("tc", "class", "show", "dev", "tbifb0").stdout
    assert "1:100" in classes and "rate 20Mbit" in classes
    assert "ingress" in run("tc", "qdisc", "show", "dev", "tbv0").stdout
    assert run("sh", str(script), "stop", "tbv0").returncode == 0
    assert "htb" not in run("tc", "qdisc", "show", "dev", "tbv0").stdout
    assert run("ip", "link", "show", "tbifb0").returncode != 0


@pytest.mark.needs_root
def test_the_hash_perturber_runs_beside_the_tree_and_stops_with_it(tmp_path: Path,
                                                                   upf_host: Run) -> None:
    """link.flow_queue_perturb_s on the lab: `start` leaves a loop that re-draws each flow queue
    set's salt (the classic-BPF program changes), and `stop` ends it."""
    run = upf_host
    spec = load_testbed()
    spec = spec.model_copy(update={"link": spec.link.model_copy(
        update={"flow_queues": 4, "flow_queue_perturb_s": 0.5})})
    script = tmp_path / "shape.sh"
    script.write_text(shaping_script(spec))

    def programs() -> str:
        return run("tc", "filter", "show", "dev", "tbv0", "parent", "1:ff").stdout

    pidfile = Path(f"/run/tb-slice-shaping-{spec.name}.perturb.pid")
    try:
        _start(run, script)
        before = programs()
        assert "bpf" in before
        loop = int(pidfile.read_text())
        time.sleep(1.5)
        assert programs() != before  # a new salt
        assert run("sh", str(script), "stop", "tbv0").returncode == 0
        time.sleep(0.2)
        assert not pidfile.exists() and not _running(loop)
    finally:
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), 9)
            pidfile.unlink()


def _running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may be slow to reap the loop)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _voice_spec():
    """The default testbed with its ai group at 5QI 5 and a 5 Mbit/s AMBR."""
    spec = load_testbed()
    voice = spec.ue_groups[0].model_copy(update={"five_qi": 5, "ambr_uplink_mbit": 5.0})
    return spec.model_copy(update={"ue_groups": [voice, *spec.ue_groups[1:]]})


def test_script_gives_a_5qi_its_priority_by_static_address_and_leaves_ambr_to_the_gnb() -> None:
    text = shaping_script(_voice_spec())
    assert "# 5QI priority inside the slices (AMBR: the gNB's): group ai 5QI 5 -> HTB prio 0" in text
    # no 5 Mbit/s ceiling on the uplink
    assert 'dev "$dev" parent 1:100 classid 1:4000 htb rate 8kbit ceil 100000kbit prio 0' in text
    assert "ht 400:2: match ip src 10.45.0.2/32 flowid 1:4000" in text
    assert "ht 400:2: match ip dst 10.45.0.2/32 flowid 1:4000" in text
    no_static = _voice_spec()
    no_static = no_static.model_copy(update={"ue_groups": [
        no_static.ue_groups[0].model_copy(update={"static_address": False}), no_static.ue_groups[1]]})
    assert "400:" not in shaping_script(no_static)  # the SMF's pool: no address to key on


@pytest.mark.needs_root
def test_the_5qi_leaves_install_on_a_real_kernel(tmp_path: Path, upf_host: Run) -> None:
    run = upf_host
    script = tmp_path / "shape.sh"
    script.write_text(shaping_script(_voice_spec()))
    _start(run, script)
    for dev in ("tbv0", "tbifb0"):
        classes = run("tc", "class", "show", "dev", dev).stdout
        assert "class htb 1:4000 parent 1:100 leaf 4000: prio 0" in classes, classes
        filters = run("tc", "filter", "show", "dev", dev).stdout
        assert "key ht 400 bkt 2 *flowid 1:4000" in filters, filters  # 10.45.0.2's last octet
        assert "link 400:" in filters
    assert run("sh", str(script), "stop", "tbv0").returncode == 0


def test_a_conditions_trace_is_refused_in_one_line_on_the_lab() -> None:
    from testbed.config.conditions import ConditionsSpec, ConditionStep
    from testbed.errors import ConfigError

    spec = load_testbed()
    trace = ConditionsSpec(trace="t.csv", steps=[ConditionStep(time_s=0, capacity_mbit=5)])
    spec = spec.model_copy(update={"link": spec.link.model_copy(update={"conditions": [trace]})})
    with pytest.raises(ConfigError) as exc:
        shaping_script(spec)
    assert str(exc.value.problems[0]).startswith("<testbed>: link.conditions: conditions traces "
                                                 "are replayed on the local profile only")
