"""Static checks of deploy/: router image, Grafana provisioning and dashboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (DEPLOY / "router" / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_router_image_is_slim_non_root_with_a_healthcheck() -> None:
    ins = dockerfile_instructions()
    args = dict(a.split("=", 1) for k, a in ins if k == "ARG" and "=" in a)
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", args["PYTHON_IMAGE"])
    froms = [a for k, a in ins if k == "FROM"]
    assert len(froms) == 2 and froms[-1] == "${PYTHON_IMAGE}"  # runtime stage: slim, no build tools
    users = [a for k, a in ins if k == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert int(users[-1].split(":")[0]) >= 1000  # numeric: Kubernetes runAsNonRoot can verify it
    (health,) = [a for k, a in ins if k == "HEALTHCHECK"]
    assert "SPECSWITCH_HEALTH_URL" in health and "/health" in dict(ins)["ENV"]
    assert json.loads(dict(ins)["ENTRYPOINT"]) == ["specswitch"]
    for k, a in ins:  # everything copied from the context exists
        if k == "COPY" and "--from" not in a:
            for src in a.split()[:-1]:
                assert (ROOT / src).exists(), src
    ignore = (DEPLOY / "router" / "Dockerfile.dockerignore").read_text().splitlines()
    assert "**" in ignore and "!router/" in ignore  # only the package folders reach the build


def test_grafana_dashboard_uses_the_provisioned_datasource() -> None:
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = ds["datasources"][0]["uid"]
    provider = yaml.safe_load(
        (DEPLOY / "grafana/provisioning/dashboards/specswitch.yml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    dash = json.loads((DEPLOY / "grafana/dashboards/specswitch.json").read_text())
    assert dash["uid"] == "specswitch"
    titles = " | ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("mode", "load", "switches", "in flight", "tokens/s", "ttft", "inter-token",
                  "drain", "kv cache"):  # fmt: skip
        assert topic in titles, topic
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        assert panel["datasource"]["uid"] == uid and panel["targets"]
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


def test_grafana_dashboard_queries_only_metrics_the_router_exports() -> None:
    from specswitch.router.config import GroupConfig, PolicyConfig
    from specswitch.router.metrics import RouterMetrics
    from specswitch.router.state import Registry

    registry = Registry()
    registry.add(GroupConfig("g0", "http://a:1", "http://a:2"))
    exported = RouterMetrics(registry, PolicyConfig).render().decode()
    text = (DEPLOY / "grafana/dashboards/specswitch.json").read_text()
    used = set(re.findall(r"specswitch_[a-z_]+", text))
    assert used, "the dashboard queries no specswitch_* metric"
    families = set(re.findall(r"^# TYPE (specswitch_\w+) ", exported, re.M))
    missing = sorted(n for n in used if re.sub(r"_(bucket|sum|count)$", "", n) not in families)
    assert not missing, f"dashboard queries metrics the router does not export: {missing}"
