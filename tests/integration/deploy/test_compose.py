"""docker-compose.yml validated by a real Docker Compose (`config`, no daemon) + its invariants."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from .plan import PLAN_NAMES, write_plan

ROOT = Path(__file__).resolve().parents[3]
LAUNCH = ROOT / "deploy" / "sglang" / "launch-server.sh"
SGLANG = ("sglang-spec", "sglang-baseline")


def compose_config(compose: list[str], *args: str, env_file: Path | None = None) -> dict:
    files = ["-f", "docker-compose.yml"]
    if "emulated" in args:
        files += ["-f", "docker-compose.emulated.yml"]
    profiles = [a for a in args if a not in ("emulated",)]
    cmd = [*compose, "--project-directory", str(ROOT), *files]
    if env_file is not None:
        cmd += ["--env-file", str(env_file)]
    for profile in profiles:
        cmd += ["--profile", profile]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.run([*cmd, "config", "--format", "json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # no warning (unset variable, obsolete key...)
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    return write_plan(tmp_path_factory.mktemp("plan"))


@pytest.fixture(scope="module")
def gpu(compose: list[str], plan: tuple[Path, dict[str, str]]) -> dict:
    return compose_config(compose, env_file=plan[0])


def test_default_stack_is_two_sglang_servers_and_the_router(gpu: dict) -> None:
    assert set(gpu["services"]) == {"sglang-spec", "sglang-baseline", "router"}


def test_official_sglang_image_pinned_by_tag(gpu: dict, plan, compose) -> None:
    for name in SGLANG:
        assert gpu["services"][name]["image"] == plan[1]["SGLANG_IMAGE"]
    bare = compose_config(compose)  # no .env: the compose file's own pin
    image = bare["services"]["sglang-spec"]["image"]
    assert re.fullmatch(r"lmsysorg/sglang:v\d+\.\d+\.\d+(\.post\d+)?(-cu\d+)?", image), image


def test_both_servers_reserve_every_gpu(gpu: dict) -> None:
    for name in SGLANG:
        devices = gpu["services"][name]["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1
        assert devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
        assert devices[0]["count"] in (-1, "all")  # all GPUs of the node (8 on the target)
    assert "deploy" not in gpu["services"]["router"]


def test_start_order_spec_healthy_before_baseline(gpu: dict) -> None:
    s = gpu["services"]
    assert s["sglang-baseline"]["depends_on"]["sglang-spec"]["condition"] == "service_healthy"
    assert "depends_on" not in s["sglang-spec"]
    assert s["router"]["depends_on"]["sglang-spec"]["condition"] == "service_healthy"


def test_healthchecks_probe_each_service_on_its_own_port(gpu: dict) -> None:
    for name, port in (("sglang-spec", 30001), ("sglang-baseline", 30002), ("router", 8000)):
        check = gpu["services"][name]["healthcheck"]
        assert any(f"127.0.0.1:{port}/health" in part for part in check["test"]), check
        assert check["interval"] and check["retries"] >= 1
    assert gpu["services"]["sglang-spec"]["healthcheck"]["start_period"]


def test_ports(gpu: dict) -> None:
    def published(name: str) -> dict[int, str]:
        return {
            int(p["target"]): p.get("host_ip", "0.0.0.0") for p in gpu["services"][name]["ports"]
        }

    assert published("sglang-spec") == {30001: "127.0.0.1"}
    assert published("sglang-baseline") == {30002: "127.0.0.1"}
    assert published("router") == {8000: "0.0.0.0", 8001: "127.0.0.1"}  # admin stays local


def test_env_from_the_plan_reaches_both_servers(gpu: dict, plan) -> None:
    values = plan[1]
    for name in SGLANG:
        env = gpu["services"][name]["environment"]
        for key in PLAN_NAMES:
            assert env[key] == values[key], (name, key)


@pytest.mark.parametrize("name", SGLANG)
def test_servers_launch_with_metrics_and_explicit_mem_fraction(gpu: dict, plan, name: str) -> None:
    """Run the service's entrypoint (the launch script, dry run) with the service's environment."""
    service = gpu["services"][name]
    assert service["entrypoint"][-1] == "/opt/specswitch/launch-server.sh"
    mounts = {v["target"]: v for v in service["volumes"]}
    assert Path(mounts["/opt/specswitch"]["source"]) == ROOT / "deploy" / "sglang"
    assert mounts["/opt/specswitch"]["read_only"] is True
    env = {"PATH": os.environ["PATH"]} | {k: v or "" for k, v in service["environment"].items()}
    proc = subprocess.run(["bash", str(LAUNCH), "--dry-run", *service["command"]],
                          env=env, capture_output=True, text=True, timeout=20)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    argv = proc.stdout.splitlines()
    role = service["command"][0]
    fraction = plan[1]["SPEC_MEM_FRACTION" if role == "spec" else "BASELINE_MEM_FRACTION"]
    assert "--enable-metrics" in argv
    assert argv[argv.index("--mem-fraction-static") + 1] == fraction
    assert argv[argv.index("--tp-size") + 1] == plan[1]["TP_SIZE"]
    assert ("--speculative-algorithm" in argv) == (role == "spec")


def test_shared_hf_cache_volume(gpu: dict) -> None:
    targets = []
    for name in SGLANG:
        (vol,) = [v for v in gpu["services"][name]["volumes"] if v["type"] == "volume"]
        targets.append((vol["source"], vol["target"]))
    assert targets[0] == targets[1] == ("hf-cache", "/root/.cache/huggingface")
    assert "hf-cache" in gpu["volumes"]


def test_router_fronts_the_group_with_the_planned_thresholds(gpu: dict, plan) -> None:
    router = gpu["services"]["router"]
    cmd = router["command"]
    assert cmd[0] == "serve"
    assert (
        cmd[cmd.index("--group") + 1] == "g0=http://sglang-spec:30001,http://sglang-baseline:30002"
    )
    assert cmd[cmd.index("--high") + 1] == plan[1]["SPECSWITCH_HIGH"]
    assert cmd[cmd.index("--low") + 1] == plan[1]["SPECSWITCH_LOW"]
    assert cmd[cmd.index("--admin-listen") + 1] == "0.0.0.0:8001"
    assert router["build"]["dockerfile"] == "deploy/router/Dockerfile"


def test_observability_profile_adds_prometheus_and_grafana(compose, plan) -> None:
    cfg = compose_config(compose, "observability", env_file=plan[0])
    s = cfg["services"]
    assert {"prometheus", "grafana"} <= set(s)
    assert s["prometheus"]["profiles"] == ["observability"] == s["grafana"]["profiles"]
    for name in ("prometheus", "grafana"):
        assert re.fullmatch(r"[\w/]+:v?\d+\.\d+\.\d+", s[name]["image"]), s[name]["image"]
    (mount,) = [v for v in s["prometheus"]["volumes"] if v["target"].endswith("prometheus.yml")]
    prom = yaml.safe_load(Path(mount["source"]).read_text())
    targets = {
        t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    assert targets == {"router:8001", "sglang-spec:30001", "sglang-baseline:30002"}
    sources = {Path(v["source"]).relative_to(ROOT).as_posix() for v in s["grafana"]["volumes"]
               if v["type"] == "bind"}  # fmt: skip
    assert sources == {"deploy/grafana/provisioning", "deploy/grafana/dashboards"}


def test_emulated_override_is_the_same_topology_without_gpus(compose) -> None:
    cfg = compose_config(compose, "emulated", "observability")  # no .env needed
    s = cfg["services"]
    assert set(s) == {"emulator", "router-emulated", "prometheus", "grafana"}
    for service in s.values():
        assert "devices" not in json.dumps(service.get("deploy", {}))
        assert "sglang" not in service["image"].split(":")[0]
    assert set(s["emulator"]["networks"]["default"]["aliases"]) == {
        "sglang-spec",
        "sglang-baseline",
    }
    assert s["router-emulated"]["networks"]["default"]["aliases"] == ["router"]
    cmd = s["emulator"]["command"]
    assert cmd[0] == "emulate" and "--enable-metrics" in cmd
    assert (cmd[cmd.index("--spec-port") + 1], cmd[cmd.index("--baseline-port") + 1]) == (
        "30001",
        "30002",
    )
    gpu_router = compose_config(compose)["services"]["router"]["command"]
    assert s["router-emulated"]["command"] == gpu_router  # the very same router command
    assert s["router-emulated"]["depends_on"]["emulator"]["condition"] == "service_healthy"
    gpu_only = compose_config(compose, "emulated", "gpu")["services"]
    assert {"sglang-spec", "sglang-baseline", "router"} <= set(gpu_only)  # moved, not deleted
