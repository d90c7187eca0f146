#!/usr/bin/env python3
"""The real Open5GS (and UERANSIM) as a peer of what `testbed up --profile lab` renders.

    scripts/open5gs_peer.py build SRC [--build-dir DIR] [--install-deps]
        Build Open5GS v2.7.x from a source checkout with meson and ninja (Debian's build
        dependencies: --install-deps runs apt-get for them; otherwise their names are printed).
    scripts/open5gs_peer.py run BUILD [-i INVENTORY] [-t TESTBED] [--seconds 6] [--json]
        Render the configs for an inventory (default: playbooks/inventory.example.yml), start every
        NF of the build on them in a private network namespace (the inventory's N2/N3 addresses
        on its loopback, the UPFs' TUN devices from the rendered tun-setup.sh) for a few seconds,
        and report per NF: config loaded, warnings (unknown keys first), PFCP association (SMFs,
        UPFs), and whether it stopped and why: for the machine (no kernel SCTP, no MongoDB server)
        or for its config. Needs root (ip netns).
    scripts/open5gs_peer.py ueransim BUILD [-i INVENTORY] [-t TESTBED] [--seconds 4] [--json]
        The same for UERANSIM v3.3.x's nr-gnb and nr-ue on the rendered gnb.yaml and ue-*.yaml.

BUILD is a meson build directory (src/<nf>/open5gs-<nf>d) or an install prefix (bin/open5gs-<nf>d);
for UERANSIM the checkout's build/ (nr-gnb, nr-ue). A build that lacks an NF is one line naming it.
tests/lab/test_open5gs_peer.py runs `run` when OPEN5GS_BUILD is set and `ueransim` when
UERANSIM_BUILD is set, and skips with that reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPEN5GS_SERIES = "2.7."
# Debian/Ubuntu packages Open5GS's "Building Open5GS from Sources" guide lists for v2.7
BUILD_DEPS = ["python3-pip", "python3-setuptools", "python3-wheel", "ninja-build", "build-essential",
              "flex", "bison", "git", "cmake", "meson", "libsctp-dev", "libgnutls28-dev",
              "libgcrypt-dev", "libssl-dev", "libmongoc-dev", "libbson-dev", "libyaml-dev",
              "libnghttp2-dev", "libmicrohttpd-dev", "libcurl4-gnutls-dev", "libtins-dev",
              "libtalloc-dev", "libidn-dev"]
# start order: NRF and SCP first (the others register there), UPFs before their SMFs
START_ORDER = ["nrf", "scp", "udr", "udm", "ausf", "pcf", "bsf", "nssf", "upf", "smf", "amf"]
UERANSIM_BINARIES = ["nr-gnb", "nr-ue"]

# what the logs say (Open5GS v2.7.x sources: lib/app, lib/dbi/ogs-mongoc.c, lib/sctp, src/*/*-sm.c)
CONFIG_LINE = re.compile(r"Configuration: '([^']+)'")
WARNING = re.compile(r"\bWARNING: (.*?)(?: \(\.\./[^)]*\))?$")
ERROR = re.compile(r"\b(?:ERROR|FATAL): (.*?)(?: \(\.\./[^)]*\))?$")
UNKNOWN_KEY = re.compile(r"unknown key `([^`]+)`")
PFCP = re.compile(r"PFCP associated")
NO_MONGODB = re.compile(r"Failed to connect to server \[")
NO_SCTP = re.compile(r"socket\(domain:\d+,type:5\) failed|Protocol not supported|ogs_sctp|SCTP",
                     re.IGNORECASE)
INIT_FAILED = re.compile(r"initiali[sz]ation failed|Failed to in(?:t)?ialize", re.IGNORECASE)
# UERANSIM v3.3.0: config errors ("Field 'mcc' is missing.", src/utils/yaml_utils.cpp),
# machine stops ("SCTP socket could not be created", src/lib/sctp)
UERANSIM_CONFIG_ERROR = re.compile(r"Field '[^']+' |yaml-cpp: error|bad file|[Cc]onfig")
UERANSIM_NO_SCTP = re.compile(r"SCTP socket could not be created|Protocol not supported", re.I)
UERANSIM_STARTED = re.compile(r"Trying to establish SCTP connection|PLMN search|UE switches to state")
UERANSIM_NO_ADDRESS = re.compile(r"Cannot assign requested address|bind failed", re.I)


class PeerError(Exception):
    """Bad input or a missing tool: one line, exit status 2."""


@dataclass
class NFReport:
    nf: str
    config: str
    loaded: bool = False
    running: bool = False  # still running when the run ended
    stopped: str = ""  # "", or why: "no kernel SCTP (machine)", "no MongoDB server (machine)", ...
    machine_stop: bool = False
    unknown_keys: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    pfcp_associated: bool | None = None  # None: not a PFCP function
    first_error: str = ""


# ---- the build ---------------------------------------------------------------------------------
def nf_of(config: Path) -> str:
    """The binary's function for a rendered config: smf-ai.yaml -> smf."""
    return config.stem.split("-")[0]


def find_binary(build: Path, name: str) -> Path | None:
    for path in (build / "src" / name / f"open5gs-{name}d", build / "bin" / f"open5gs-{name}d"):
        if path.is_file() and os.access(path, os.X_OK):
            return path
    return None


def check_build(build: Path, nfs: list[str]) -> dict[str, Path]:
    """Each NF's binary in `build`; a PeerError naming the first NF it lacks."""
    if not build.is_dir():
        raise PeerError(f"{build}: not a directory (an Open5GS meson build directory or install "
                        "prefix)")
    found = {nf: find_binary(build, nf) for nf in dict.fromkeys(nfs)}
    missing = [nf for nf, path in found.items() if path is None]
    if missing:
        raise PeerError(f"{build}: no open5gs-{missing[0]}d (the {missing[0].upper()}) in "
                        f"src/{missing[0]}/ or bin/: build it with `ninja -C {build}`"
                        + (f" (also missing: {', '.join(missing[1:])})" if missing[1:] else ""))
    return {nf: path for nf, path in found.items() if path is not None}


def check_source(src: Path) -> str:
    """The checkout's version from meson.build; a PeerError unless it is v2.7.x."""
    meson = src / "meson.build"
    if not meson.is_file():
        raise PeerError(f"{src}: no meson.build: not an Open5GS source checkout")
    match = re.search(r"version\s*:\s*'([^']+)'", meson.read_text())
    version = match.group(1) if match else "?"
    if not version.startswith(OPEN5GS_SERIES):
        raise PeerError(f"{src}: Open5GS {version}, not v{OPEN5GS_SERIES}x (git checkout v2.7.7)")
    return version


def build(src: Path, build_dir: Path | None, install_deps: bool) -> Path:
    version = check_source(src)
    missing = [p for p in BUILD_DEPS if subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True).stdout
        .find("install ok installed") < 0] if shutil.which("dpkg-query") else []
    if missing and install_deps:
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", *missing], check=True)
    elif missing:
        print(f"missing build dependencies (--install-deps installs them): apt-get install "
              f"{' '.join(missing)}", file=sys.stderr)
    for tool in ("meson", "ninja"):
        if shutil.which(tool) is None:
            raise PeerError(f"{tool} is not on PATH (apt-get install meson ninja-build)")
    out = build_dir or src / "build"
    if not (out / "build.ninja").is_file():
        subprocess.run(["meson", "setup", str(out)], cwd=src, check=True)
    t0 = time.monotonic()
    subprocess.run(["ninja", "-C", str(out)], check=True)
    print(f"Open5GS {version} built in {out} ({time.monotonic() - t0:.0f} s)")
    return out


# ---- rendering ---------------------------------------------------------------------------------
def render(inventory: Path, testbed: Path | None, dest: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from testbed.config import load_testbed
    from testbed.lab.inventory import LabInventory
    from testbed.lab.render import render_lab

    render_lab(load_testbed(testbed), LabInventory.load(inventory), dest)
    return dest


IPV4 = r"(\d{1,3}(?:\.\d{1,3}){3})"


def bound_addresses(configs: list[Path]) -> list[str]:
    """The non-loopback addresses the Open5GS functions bind: their `server` lists' addresses
    (the AMF's N2, each UPF's N3); clients' addresses (`client: upf: - address`) are not bound."""
    import yaml

    found: set[str] = set()

    def walk(node: object, under_server: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "address" and under_server:
                    found.update(str(a) for a in (value if isinstance(value, list) else [value]))
                walk(value, (under_server or key == "server") and key != "client")
        elif isinstance(node, list):
            for item in node:
                walk(item, under_server)

    for path in configs:
        walk(yaml.safe_load(path.read_text()), False)
    return sorted(a for a in found if re.fullmatch(IPV4, a) and not a.startswith("127."))


def gnb_addresses(gnb: Path) -> list[str]:
    """The gNB's own addresses (linkIp, ngapIp, gtpIp): the UEs' radio link binds linkIp."""
    return sorted(set(re.findall(r"^(?:linkIp|ngapIp|gtpIp):\s+" + IPV4, gnb.read_text(), re.M)))


# ---- the private network namespace -------------------------------------------------------------
class Netns:
    """`ip netns` NAME with lo up and `addresses` on it; removed on close (safe twice)."""

    def __init__(self, name: str, addresses: list[str]):
        if os.geteuid() != 0:
            raise PeerError("running the NFs in a private network namespace needs root (ip netns)")
        if shutil.which("ip") is None:
            raise PeerError("ip is not on PATH (apt-get install iproute2)")
        self.name = name
        self._open = False
        subprocess.run(["ip", "netns", "add", name], check=True)
        self._open = True
        try:
            self.run(["ip", "link", "set", "lo", "up"])
            for addr in addresses:
                self.run(["ip", "addr", "add", f"{addr}/32", "dev", "lo"])
        except BaseException:
            self.close()
            raise

    def argv(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: list[str]) -> None:
        subprocess.run(self.argv(argv), check=True, capture_output=True, text=True)

    def close(self) -> None:
        if self._open:
            subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)
            self._open = False

    def __enter__(self) -> Netns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_processes(ns: Netns, commands: list[tuple[str, list[str]]], logs: Path, seconds: float,
                  gap_s: float = 0.3) -> dict[str, tuple[str, bool]]:
    """Start each (label, argv) in `ns` in turn, let them run `seconds`, stop them (SIGTERM, then
    SIGKILL); label -> (its output, whether it still ran at the end)."""
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    try:
        for label, argv in commands:
            log = logs / f"{label}.log"
            with log.open("wb") as out:
                procs[label] = (subprocess.Popen(ns.argv(argv), stdout=out, stderr=subprocess.STDOUT,
                                                 start_new_session=True), log)
            time.sleep(gap_s)
        time.sleep(seconds)
        alive = {label: proc.poll() is None for label, (proc, _) in procs.items()}
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc, _ in procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return {label: (log.read_text(errors="replace"), alive[label]) for label, (_, log) in procs.items()}


# ---- reading the logs --------------------------------------------------------------------------
def classify(nf: str, config: str, log: str, running: bool) -> NFReport:
    """What an NF's log says about its config (see the patterns above)."""
    rep = NFReport(nf=nf, config=config, running=running)
    rep.loaded = bool(CONFIG_LINE.search(log)) and not any(
        "parse" in m.lower() or "yaml" in m.lower() for m in ERROR.findall(log))
    for line in log.splitlines():
        warning = WARNING.search(line)
        if warning:
            rep.warnings.append(warning.group(1))
        unknown = UNKNOWN_KEY.search(line)
        if unknown:
            rep.unknown_keys.append(unknown.group(1))
        error = ERROR.search(line)
        if error and not rep.first_error:
            rep.first_error = error.group(1)
    if nf in ("smf", "upf"):
        rep.pfcp_associated = bool(PFCP.search(log))
    if not running:
        if NO_MONGODB.search(log):
            rep.stopped, rep.machine_stop = "no MongoDB server (machine)", True
        elif nf == "amf" and NO_SCTP.search(log):
            rep.stopped, rep.machine_stop = "no kernel SCTP (machine)", True
        elif INIT_FAILED.search(log) or rep.first_error:
            rep.stopped = f"config or start: {rep.first_error or 'initialization failed'}"
        else:
            rep.stopped = "exited"
    return rep


def classify_ueransim(label: str, config: str, log: str, running: bool) -> NFReport:
    rep = NFReport(nf=label, config=config, running=running)
    config_error = next((line for line in log.splitlines() if UERANSIM_CONFIG_ERROR.search(line)), "")
    rep.loaded = not config_error and (running or bool(UERANSIM_STARTED.search(log))
                                       or bool(UERANSIM_NO_SCTP.search(log))
                                       or bool(UERANSIM_NO_ADDRESS.search(log)))
    rep.first_error = config_error
    if not running:
        if UERANSIM_NO_SCTP.search(log):
            rep.stopped, rep.machine_stop = "no kernel SCTP (machine)", True
        elif UERANSIM_NO_ADDRESS.search(log):
            rep.stopped, rep.machine_stop = "an address this machine lacks (machine)", True
        else:
            rep.stopped = f"config or start: {config_error or log.strip().splitlines()[-1:] or 'exited'}"
    return rep


# ---- the runs ----------------------------------------------------------------------------------
def open5gs_configs(rendered: Path) -> list[Path]:
    configs = [p for p in sorted((rendered / "open5gs").glob("*.yaml")) if p.name != "compose.yaml"]
    return sorted(configs, key=lambda p: (START_ORDER.index(nf_of(p)) if nf_of(p) in START_ORDER
                                          else len(START_ORDER), p.name))


def run_open5gs(build_dir: Path, rendered: Path, seconds: float, logs: Path) -> list[NFReport]:
    configs = open5gs_configs(rendered)
    binaries = check_build(build_dir, [nf_of(p) for p in configs])  # before any namespace
    with Netns(f"tbo5gs{os.getpid()}", bound_addresses(configs)) as ns:
        tun = rendered / "open5gs" / "tun-setup.sh"
        if tun.is_file():
            ns.run(["sh", str(tun)])
        outputs = run_processes(ns, [(p.stem, [str(binaries[nf_of(p)]), "-c", str(p)])
                                     for p in configs], logs, seconds)
    return [classify(nf_of(p), p.name, *outputs[p.stem]) for p in configs]


def run_ueransim(build_dir: Path, rendered: Path, seconds: float, logs: Path) -> list[NFReport]:
    missing = [b for b in UERANSIM_BINARIES if not (build_dir / b).is_file()]
    if missing:
        raise PeerError(f"{build_dir}: no {missing[0]} (UERANSIM's build/ after `make`)")
    gnb = rendered / "ueransim" / "gnb.yaml"
    ues = sorted((rendered / "ueransim").glob("ue-*.yaml"))
    with Netns(f"tburs{os.getpid()}", gnb_addresses(gnb)) as ns:
        commands = [("gnb", [str(build_dir / "nr-gnb"), "-c", str(gnb)])]
        commands += [(p.stem, [str(build_dir / "nr-ue"), "-c", str(p)]) for p in ues]
        outputs = run_processes(ns, commands, logs, seconds)
    return [classify_ueransim(label, cfg, *outputs[label])
            for label, cfg in [("gnb", gnb.name), *[(p.stem, p.name) for p in ues]]]


def summary(reports: list[NFReport]) -> str:
    loaded = sum(r.loaded for r in reports)
    unknown = sum(len(r.unknown_keys) for r in reports)
    pfcp = [r for r in reports if r.pfcp_associated is not None]
    machine = [r.config for r in reports if r.machine_stop]
    config = [r.config for r in reports if r.stopped and not r.machine_stop]
    text = f"{loaded} of {len(reports)} loaded their config, {unknown} unknown keys"
    if pfcp:
        text += f", PFCP associated: {sum(bool(r.pfcp_associated) for r in pfcp)} of {len(pfcp)}"
    text += f"; stopped for the machine: {', '.join(machine) or 'none'}"
    text += f"; stopped otherwise: {', '.join(config) or 'none'}"
    return text


def print_table(reports: list[NFReport]) -> None:
    print(f"{'config':16} {'loaded':6} {'running':7} {'PFCP':5} {'warnings':8}  stopped / first warning")
    for r in reports:
        pfcp = "-" if r.pfcp_associated is None else ("yes" if r.pfcp_associated else "no")
        note = r.stopped or (f"unknown keys: {', '.join(r.unknown_keys)}" if r.unknown_keys
                             else (r.warnings[0] if r.warnings else ""))
        print(f"{r.config:16} {'yes' if r.loaded else 'NO':6} {'yes' if r.running else 'no':7} "
              f"{pfcp:5} {len(r.warnings):<8}  {note}")
    print(summary(reports))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="meson + ninja build of an Open5GS v2.7.x checkout")
    b.add_argument("src", type=Path)
    b.add_argument("--build-dir", type=Path)
    b.add_argument("--install-deps", action="store_true")
    for name, seconds in (("run", 6.0), ("ueransim", 4.0)):
        r = sub.add_parser(name, help=f"run the {'NFs' if name == 'run' else 'gNB and UEs'} on "
                                      "the rendered configs")
        r.add_argument("build", type=Path)
        r.add_argument("-i", "--inventory", type=Path,
                       default=ROOT / "playbooks" / "inventory.example.yml")
        r.add_argument("-t", "--testbed", type=Path)
        r.add_argument("--seconds", type=float, default=seconds)
        r.add_argument("--json", action="store_true", help="one JSON document on stdout")
        r.add_argument("--logs", type=Path, help="keep each process's log here")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(args.src, args.build_dir, args.install_deps)
            return 0
        with tempfile.TemporaryDirectory(prefix="tb-peer-") as tmp:
            rendered = render(args.inventory, args.testbed, Path(tmp) / "rendered")
            logs = args.logs or Path(tmp) / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            runner = run_open5gs if args.command == "run" else run_ueransim
            t0 = time.monotonic()
            reports = runner(args.build, rendered, args.seconds, logs)
            if args.json:
                print(json.dumps({"inventory": str(args.inventory), "seconds": args.seconds,
                                  "wall_s": round(time.monotonic() - t0, 1), "summary": summary(reports),
                                  "functions": [asdict(r) for r in reports]}, indent=1))
            else:
                print_table(reports)
        return 0
    except PeerError as exc:
        print(f"open5gs_peer: {exc}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as exc:
        print(f"open5gs_peer: {' '.join(map(str, exc.cmd))} failed with {exc.returncode}",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
