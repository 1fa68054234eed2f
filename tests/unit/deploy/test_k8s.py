"""deploy/k8s: built with `kubectl kustomize` (where kubectl exists) and checked as parsed YAML."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from specswitch.router.discovery import group_name_for
from specswitch.router.serve import build_config

from specswitch.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "deploy" / "k8s"
SCRIPTS = ROOT / "deploy" / "sglang"


def kustomize_build() -> list[dict[str, Any]] | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    proc = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def read_sources() -> list[dict[str, Any]]:
    """Without kubectl: the manifests as written plus the two generated ConfigMaps (no hash)."""
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs: list[dict[str, Any]] = []
    for res in kust["resources"]:
        if (K8S / res).is_file():
            docs += [d for d in yaml.safe_load_all((K8S / res).read_text()) if d]
    plan = dict(
        line.split("=", 1) for line in (K8S / "plan.env").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )  # fmt: skip
    scripts = yaml.safe_load((SCRIPTS / "kustomization.yaml").read_text())["configMapGenerator"][0]
    docs.append({"kind": "ConfigMap", "metadata": {"name": "sglang-plan"}, "data": plan})
    for d in docs:  # the kustomization's replacement: the plan names the SGLang image
        if d["kind"] == "StatefulSet":
            d["spec"]["template"]["spec"]["containers"][0]["image"] = plan["SGLANG_IMAGE"]
    docs.append({"kind": "ConfigMap", "metadata": {"name": "sglang-launch"},
                 "data": {f: (SCRIPTS / f).read_text() for f in scripts["files"]}})  # fmt: skip
    return docs


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return kustomize_build() or read_sources()


def test_kustomize_build_one_namespace() -> None:
    built = kustomize_build()
    if built is None:
        pytest.skip("kubectl is not installed: `kubectl kustomize deploy/k8s` not run "
                    "(the other checks ran on the source manifests)")  # fmt: skip
    for d in built:
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == "specswitch", d["metadata"]["name"]
    names = {d["metadata"]["name"] for d in built if d["kind"] == "ConfigMap"}
    assert all("-" in n and n.rsplit("-", 1)[0] in ("sglang-plan", "sglang-launch") for n in names)


def find(docs: list[dict], kind: str, name: str) -> dict:
    """The one object of that kind and name (generated ConfigMaps carry a hash suffix)."""

    def named(d: dict) -> bool:
        actual = d["metadata"]["name"]
        return actual == name or (kind == "ConfigMap" and actual.rsplit("-", 1)[0] == name)

    (doc,) = [d for d in docs if d["kind"] == kind and named(d)]
    return doc


def pod_spec(docs: list[dict], kind: str, name: str) -> dict:
    return find(docs, kind, name)["spec"]["template"]["spec"]


def env_of(container: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_launch_scripts_configmap_holds_the_compose_scripts(docs) -> None:
    launch = find(docs, "ConfigMap", "sglang-launch")
    for name in ("launch-server.sh", "launch-group.sh", "prestop_drain.py", "group-health.sh"):
        assert (
            launch["data"][name] == (SCRIPTS / name).read_text()
        )  # the very scripts compose mounts


def test_one_group_pod_per_gpu_node_with_every_gpu(docs) -> None:
    sts = find(docs, "StatefulSet", "sglang-group")
    assert sts["spec"]["replicas"] >= 2 and sts["spec"]["serviceName"] == "sglang-groups"
    spec = sts["spec"]["template"]["spec"]
    (term,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert (
        term["labelSelector"]["matchLabels"].items()
        <= sts["spec"]["template"]["metadata"]["labels"].items()
    )
    (c,) = spec["containers"]
    assert (
        c["resources"]["limits"]["nvidia.com/gpu"]
        == 8
        == c["resources"]["requests"]["nvidia.com/gpu"]
    )
    plan = find(docs, "ConfigMap", "sglang-plan")
    assert c["image"] == plan["data"]["SGLANG_IMAGE"]  # official image, pinned by the plan
    assert c["image"].startswith("lmsysorg/sglang:v") and not c["image"].endswith(":latest")
    assert c["command"][-1] == "/opt/specswitch/launch-group.sh"  # spec first, then baseline
    assert {p["containerPort"] for p in c["ports"]} == {30001, 30002}
    assert c["envFrom"][0]["configMapRef"]["name"] == plan["metadata"]["name"]
    for key in ("MODEL_PATH", "SPEC_MEM_FRACTION", "BASELINE_MEM_FRACTION", "TP_SIZE"):
        assert plan["data"][key], key
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert (
        volumes["launch"]["configMap"]["name"]
        == find(docs, "ConfigMap", "sglang-launch")["metadata"]["name"]
    )
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/opt/specswitch", "/root/.cache/huggingface", "/dev/shm"} <= mounts


def test_group_probes_and_prestop_drain(docs) -> None:
    spec = pod_spec(docs, "StatefulSet", "sglang-group")
    (c,) = spec["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        cmd = c[probe]["exec"]["command"]
        assert cmd[:2] == ["/bin/bash", "/opt/specswitch/group-health.sh"], probe
    assert c["readinessProbe"]["exec"]["command"][-1] == "/health"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 1800
    assert c["lifecycle"]["preStop"]["exec"]["command"] == [
        "python3",
        "/opt/specswitch/prestop_drain.py",
    ]
    env = env_of(c)
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert spec["terminationGracePeriodSeconds"] > float(env["DRAIN_TIMEOUT_S"])
    svc = find(docs, "Service", "sglang-groups")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is False
    pdb = find(docs, "PodDisruptionBudget", "sglang-group")
    assert pdb["spec"]["maxUnavailable"] == 1


def router_args(docs) -> list[str]:
    (c,) = pod_spec(docs, "Deployment", "specswitch-router")["containers"]
    plan = find(docs, "ConfigMap", "sglang-plan")["data"]
    out = []
    for arg in c["args"]:  # Kubernetes expands $(VAR) from the container's env
        for name, ref in env_of(c).items():
            if isinstance(ref, dict) and "configMapKeyRef" in ref:
                arg = arg.replace(f"$({name})", plan[ref["configMapKeyRef"]["key"]])
        out.append(arg)
    return out


def test_router_replicas_discover_the_group_service(docs) -> None:
    dep = find(docs, "Deployment", "specswitch-router")
    assert dep["spec"]["replicas"] >= 2
    args = router_args(docs)
    config = build_config(build_parser().parse_args(args), env={})  # the router's own parser
    disc = config.discovery
    group_svc = find(docs, "Service", "sglang-groups")
    assert disc.dns_name == group_svc["metadata"]["name"]
    assert {disc.spec_port, disc.baseline_port} == {p["port"] for p in group_svc["spec"]["ports"]}
    assert config.policy.load_signal == "max"  # replicas agree on the mode (docs/deployment.md)
    plan = find(docs, "ConfigMap", "sglang-plan")["data"]
    assert (config.policy.high, config.policy.low) == (
        int(plan["SPECSWITCH_HIGH"]),
        int(plan["SPECSWITCH_LOW"]),
    )
    assert config.admin_listen.endswith(":8001") and config.listen.endswith(":8000")
    # the group pods' preStop names the group exactly as the router's discovery does
    (c,) = pod_spec(docs, "StatefulSet", "sglang-group")["containers"]
    env = env_of(c)
    assert env["DISCOVERY_DNS_NAME"] == disc.dns_name
    assert (
        env["ROUTER_ADMIN_DNS"]
        == find(docs, "Service", "specswitch-router-admin")["metadata"]["name"]
    )
    assert group_name_for(env["DISCOVERY_DNS_NAME"], "10.1.2.3") == "sglang-groups-10-1-2-3"


def test_router_probes_prestop_and_hardening(docs) -> None:
    spec = pod_spec(docs, "Deployment", "specswitch-router")
    (c,) = spec["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["livenessProbe"]  # not /health: no group yet is not a crash
    assert "httpGet" not in c["livenessProbe"] or c["livenessProbe"]["httpGet"]["path"] != "/health"
    assert c["lifecycle"]["preStop"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    args = router_args(docs)
    grace = float(args[args.index("--shutdown-grace") + 1])
    assert spec["terminationGracePeriodSeconds"] > grace
    svc = find(docs, "Service", "specswitch-router")
    labels = find(docs, "Deployment", "specswitch-router")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert [p["port"] for p in svc["spec"]["ports"]] == [8000]
    admin = find(docs, "Service", "specswitch-router-admin")
    assert admin["spec"]["clusterIP"] == "None"
    assert find(docs, "PodDisruptionBudget", "specswitch-router")["spec"]["minAvailable"] >= 1


def test_example_plan_is_a_complete_planner_env_the_launcher_accepts() -> None:
    names = ("MODEL_PATH TP_SIZE SPEC_ALGORITHM SPEC_MEM_FRACTION BASELINE_MEM_FRACTION "
             "SPECSWITCH_HIGH SPECSWITCH_LOW SGLANG_IMAGE").split()  # fmt: skip
    text = (K8S / "plan.env").read_text()
    assert text.startswith("# specswitch layout plan:")  # written by the planner, not by hand
    keys = {line.split("=", 1)[0] for line in text.splitlines() if "=" in line and line[0] != "#"}
    assert set(names) <= keys
    clean = {"PATH": "/usr/bin:/bin"}
    for role in ("spec", "baseline"):
        proc = subprocess.run(
            ["bash", str(SCRIPTS / "launch-server.sh"), "--env-file", str(K8S / "plan.env"),
             "--dry-run", role], env=clean, capture_output=True, text=True, timeout=20,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "--mem-fraction-static" in proc.stdout.split()


def test_optional_podmonitors_scrape_router_admin_and_both_servers() -> None:
    path = K8S / "monitoring" / "podmonitors.yaml"
    monitors = {d["metadata"]["name"]: d for d in yaml.safe_load_all(path.read_text()) if d}
    ports = {n: [e["port"] for e in m["spec"]["podMetricsEndpoints"]] for n, m in monitors.items()}
    assert ports == {"specswitch-router": ["admin"], "sglang-group": ["spec", "baseline"]}
    (group_rule,) = [r for r in monitors["sglang-group"]["spec"]["podMetricsEndpoints"][0]["relabelings"]
                     if r["targetLabel"] == "group"]  # fmt: skip
    name = re.sub(group_rule["regex"], group_rule["replacement"].replace("$", "\\"), "10.1.2.3")
    assert name == group_name_for("sglang-groups", "10.1.2.3")  # same label as the router's
    if shutil.which("kubectl"):
        proc = subprocess.run(["kubectl", "kustomize", str(K8S / "monitoring")],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
