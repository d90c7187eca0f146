"""Static checks of the lab profile that CI runs without any lab: playbooks, manifests, configs."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.config import load_testbed
from testbed.lab.inventory import LabInventory
from testbed.lab.render import render_lab

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
K8S_VERSION = "1.31"  # the K3s minor the playbooks pin (k3s_server_version)


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install 'testbed[lab]')")
    return path


@pytest.mark.parametrize("playbook", ["site.yml", "reset.yml", "status.yml"])
def test_playbook_syntax(playbook: str) -> None:
    exe = _tool("ansible-playbook")
    proc = subprocess.run([exe, "--syntax-check", "-i", "inventory.example.yml", playbook],
                          cwd=PLAYBOOKS, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_ansible_lint_production_profile() -> None:
    exe = _tool("ansible-lint")
    proc = subprocess.run([exe, "--offline", "--profile", "production", "--nocolor"], cwd=PLAYBOOKS,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def _role_defaults(role: str) -> dict:
    return yaml.safe_load((PLAYBOOKS / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def _render_role_template(role: str, name: str, **extra: object) -> list[dict]:
    jinja2 = pytest.importorskip("jinja2")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    text = (PLAYBOOKS / "roles" / role / "templates" / name).read_text()
    values = {"ansible_managed": "managed by testbed", **_role_defaults(role), **extra}
    return [d for d in yaml.safe_load_all(env.from_string(text).render(values)) if d]


def _validate(doc: dict, where: str) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    try:
        kv.validate(doc, K8S_VERSION, strict=True)
    except kv.ValidationError as exc:
        pytest.fail(f"{where}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}: {exc.message}")


def test_role_manifests_match_the_kubernetes_schema() -> None:
    docs = _render_role_template("gpu_operator", "mps-sharing.yaml.j2")
    docs += _render_role_template("services", "namespace.yaml.j2")
    assert {d["kind"] for d in docs} == {"Namespace", "ConfigMap"}
    for doc in docs:
        _validate(doc, "playbooks/roles")
    mps = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["mps"])
    assert mps["sharing"]["mps"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_schema_validation_rejects_a_bad_manifest() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"replicas": "two", "selector": {}, "template": {}}}
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, K8S_VERSION, strict=True)


def test_workload_manifests_match_the_kubernetes_schema(tmp_path: Path) -> None:
    """The manifests `up --profile lab` generates from the profiles' deploy: (their one home:
    workloads/ holds no hand-written manifest)."""
    from testbed.lab.bringup import prepare_manifests

    assert not [f for f in (ROOT / "workloads").glob("**/*.y*ml")], "manifests are generated"
    files = prepare_manifests(tmp_path)
    manifests = [(f, d) for f in files for d in yaml.safe_load_all(f.read_text())]
    assert {d["kind"] for _, d in manifests} == {"Deployment", "Service"}
    for path, doc in manifests:
        _validate(doc, str(path.relative_to(tmp_path)))


def _rendered_dir(tmp_path: Path) -> Path:
    """What `lab up` renders for the default testbed and the example inventory (a renderer that
    fails fails the test)."""
    render_lab(load_testbed(), LabInventory.load(PLAYBOOKS / "inventory.example.yml"), tmp_path)
    return tmp_path


# Field names of the targeted releases (Open5GS v2.7.x, UERANSIM v3.3.0), see docs/lab.md.
OPEN5GS_REQUIRED = {
    "amf": [("amf", "ngap", "server"), ("amf", "guami"), ("amf", "tai"), ("amf", "plmn_support"),
            ("amf", "security")],
    "smf": [("smf", "pfcp", "client", "upf"), ("smf", "session"), ("smf", "info")],
    "upf": [("upf", "pfcp", "server"), ("upf", "gtpu", "server"), ("upf", "session")],
}
UE_KEYS = {"supi", "mcc", "mnc", "key", "op", "opType", "amf", "gnbSearchList", "sessions",
           "configured-nssai", "default-nssai", "integrity", "ciphering"}
GNB_KEYS = {"mcc", "mnc", "nci", "idLength", "tac", "linkIp", "ngapIp", "gtpIp", "amfConfigs", "slices"}
OLD_STYLE = {"addr", "sbi", "parameter", "max"}  # top-level/old keys of the <= v2.6 format


def _get(doc: dict, path: tuple[str, ...]) -> object:
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def test_rendered_configs_use_the_targeted_field_names(tmp_path: Path) -> None:
    rendered = _rendered_dir(tmp_path)
    seen: dict[str, int] = {}
    open5gs_sds: set[int] = set()
    for f in sorted((rendered / "open5gs").glob("*.yaml")):
        doc = yaml.safe_load(f.read_text())
        nf = f.stem.split("-")[0]
        assert not OLD_STYLE & set(doc), f"{f.name}: v2.6-style top-level keys {OLD_STYLE & set(doc)}"
        for path in OPEN5GS_REQUIRED.get(nf, []):
            assert _get(doc, path) is not None, f"{f.name}: missing {'.'.join(path)}"
        seen[nf] = seen.get(nf, 0) + 1
        for info in (_get(doc, ("smf", "info")) or []):
            for s in info["s_nssai"]:
                assert isinstance(s.get("sd", ""), str), f"{f.name}: Open5GS sd must be a hex string"
                open5gs_sds.add(int(s["sd"], 16))
    spec = load_testbed()
    assert seen.get("smf") == seen.get("upf") == len(spec.slices), "one SMF and one UPF per slice"
    gnb = yaml.safe_load((rendered / "ueransim" / "gnb.yaml").read_text())
    assert set(gnb) >= GNB_KEYS, f"gnb.yaml lacks {GNB_KEYS - set(gnb)}"
    assert isinstance(gnb["mnc"], str), "mnc must be quoted (its length matters)"
    for group in spec.ue_groups:
        ue = yaml.safe_load((rendered / "ueransim" / f"ue-{group.name}.yaml").read_text())
        assert set(ue) >= UE_KEYS, f"ue-{group.name}.yaml lacks {UE_KEYS - set(ue)}"
        assert ue["supi"].startswith("imsi-") and ue["opType"] in ("OP", "OPC")
        for session in ue["sessions"]:
            assert "apn" in session, "UERANSIM names the DNN `apn`"
            assert isinstance(session["slice"]["sd"], int), "UERANSIM sd is an integer (0x-hex)"
            assert session["slice"]["sd"] in open5gs_sds, "UE slice unknown to every SMF"


def _compose_problems(doc: object) -> list[str]:
    """Structural checks of a Compose file (the spec's top-level shape and references)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict) or not doc["services"]:
        return ["top level needs a non-empty `services` mapping"]
    problems = []
    known_top = {"version", "name", "services", "networks", "volumes", "configs", "secrets", "include"}
    problems += [f"unknown top-level key {k!r}" for k in set(doc) - known_top if not k.startswith("x-")]
    networks = set((doc.get("networks") or {}).keys()) | {"default"}
    volumes = set((doc.get("volumes") or {}).keys())
    for name, svc in doc["services"].items():
        if not isinstance(svc, dict) or not ({"image", "build"} & set(svc)):
            problems.append(f"service {name}: needs image or build")
            continue
        deps = svc.get("depends_on") or []
        for dep in deps if isinstance(deps, list) else list(deps):
            if dep not in doc["services"]:
                problems.append(f"service {name}: depends_on unknown service {dep!r}")
        nets = svc.get("networks") or []
        for net in nets if isinstance(nets, list) else list(nets):
            if net not in networks:
                problems.append(f"service {name}: network {net!r} is not declared")
        for vol in svc.get("volumes") or []:
            src = vol.split(":")[0] if isinstance(vol, str) else vol.get("source", "")
            if src and not src.startswith((".", "/", "~")) and src not in volumes:
                problems.append(f"service {name}: named volume {src!r} is not declared")
    return problems


def test_compose_checker_finds_broken_references() -> None:
    good = {"services": {"db": {"image": "mongo:6"}, "amf": {"image": "x", "depends_on": ["db"],
                                                             "networks": ["core"]}},
            "networks": {"core": {}}}
    assert _compose_problems(good) == []
    bad = {"services": {"amf": {"depends_on": ["nrf"]}, "smf": {"image": "x", "volumes": ["data:/d"]}}}
    assert _compose_problems(bad) == ["service amf: needs image or build",
                                      "service smf: named volume 'data' is not declared"]


DEPENDS_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


@pytest.mark.parametrize("mongo_uri", [None, "mongodb://db.lab:27017/open5gs"])
def test_rendered_compose_file_is_structurally_valid(mongo_uri: str | None) -> None:
    """open5gs/compose.yaml.j2 rendered from the default testbed (with its own MongoDB, and with
    the lab's): the Compose shape, and every config, script and dependency it names exists."""
    from testbed.core.render import open5gs_files

    spec = load_testbed()
    spec = spec.model_copy(update={"core": spec.core.model_copy(update={"mongo_uri": mongo_uri})})
    files = open5gs_files(spec)
    doc = yaml.safe_load(files["compose.yaml"])  # merge keys (<<: *open5gs) resolved
    assert _compose_problems(doc) == []
    assert re.fullmatch(r"[a-z0-9][a-z0-9_-]*", doc["name"]), "Compose project names are lowercase"
    services = doc["services"]
    assert ("mongo" in services) == (mongo_uri is None)
    for plane in spec.slices:
        assert {f"smf-{plane.name}", f"upf-{plane.name}"} <= set(services)
    mount = "/etc/testbed/open5gs/"
    for name, svc in services.items():
        assert svc["image"], name
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert cond["condition"] in DEPENDS_CONDITIONS, (name, dep)
        args = [*svc.get("entrypoint", []), *svc.get("command", [])]
        named = [a.removeprefix(mount) for a in args if a.startswith(mount)]
        assert all(f in files for f in named), (name, named)  # configs the render writes
        if name not in ("mongo", "tun-setup"):
            assert svc["entrypoint"] == [f"open5gs-{name.split('-')[0]}d"], name
            assert len(named) == 1, name
    # no service waits for itself or for one that waits for it (compose would refuse)
    deps = {n: set(s.get("depends_on") or {}) for n, s in services.items()}
    for n, ds in deps.items():
        assert n not in ds and not any(n in deps[d] for d in ds), n
