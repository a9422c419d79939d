"""deploy/: every Kubernetes manifest and overlay rendered by kustomize and checked by kubeconform in
strict mode against Kubernetes' own schemas (v1.37) and KServe's CRD schemas (v0.20), made offline
by tools/kubernetes-tools.sh (and KEDA's, v2.21, for deploy/keda); then what the manifests must agree
on with the server itself."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
KUSTOMIZATIONS = ["deploy/kubernetes/base", "deploy/kubernetes/overlays/cpu", "deploy/kubernetes/overlays/production", "deploy/kserve", "deploy/keda"]


@pytest.fixture(scope="module")
def tools():
    result = subprocess.run(["bash", str(ROOT / "tools" / "kubernetes-tools.sh"), sys.executable],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def render(tools, kustomization):
    result = subprocess.run([tools["kustomize"], "build", str(ROOT / kustomization)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def kubeconform(tools, text):
    location = f"{tools['schemas']}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json"
    return subprocess.run([tools["kubeconform"], "-strict", "-summary", "-schema-location", location, "-"],
                          input=text, capture_output=True, text=True)


def resources(tools, kustomization):
    return {(r["kind"], r["metadata"]["name"]): r for r in yaml.safe_load_all(render(tools, kustomization)) if r}


def check_config(node_yaml, tmp_path, env):
    path = tmp_path / "node.yaml"
    path.write_text(node_yaml)
    return subprocess.run(["node", str(ROOT / "main.js"), "--check-config", str(path)], capture_output=True, text=True,
                          env={**os.environ, **env})


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_every_manifest_passes_kubeconform_strict(tools, kustomization):
    result = kubeconform(tools, render(tools, kustomization))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in result.stdout, result.stdout


def test_the_strict_schemas_refuse_a_misspelt_key_and_a_wrong_type(tools):
    bad = render(tools, "deploy/kubernetes/base").replace("terminationGracePeriodSeconds", "terminationGracePeriodSecond")
    result = kubeconform(tools, bad)
    assert result.returncode != 0 and "additional properties 'terminationGracePeriodSecond' not allowed" in result.stdout
    runtime = (ROOT / "deploy" / "kserve" / "servingruntime.yaml").read_text().replace("multiModel: false", 'multiModel: "no"')
    result = kubeconform(tools, runtime)
    assert result.returncode != 0 and "want boolean" in result.stdout


def test_nodes_a_headless_service_and_a_gateway_that_finds_them_by_dns(tools, tmp_path):
    r = resources(tools, "deploy/kubernetes/base")
    node, headless, gateway = r["StatefulSet", "stowage-node"], r["Service", "stowage-node"], r["Deployment", "stowage-gateway"]
    assert node["spec"]["serviceName"] == headless["metadata"]["name"] and headless["spec"]["clusterIP"] == "None"
    pod = node["spec"]["template"]
    container = pod["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz" and container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8002"
    # The image's node file: the repository volume is mounted where it looks, and SIGTERM's drain fits the grace period.
    image_node = yaml.safe_load((ROOT / "docker" / "node.yaml").read_text())
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["models"] == image_node["model_repo"] and mounts["compile-cache"] == image_node["cache_dir"]
    grace = image_node["global"]["endpoints"].get("shutdown_grace_seconds", 30)
    assert pod["spec"]["terminationGracePeriodSeconds"] > grace
    endpoints = image_node["global"]["endpoints"]
    assert {p["containerPort"] for p in container["ports"]} == {endpoints["grpc_port"], endpoints["http_port"], endpoints["admin_port"]}
    for pdb in ("stowage-node", "stowage-gateway"):
        selector = r["PodDisruptionBudget", pdb]["spec"]["selector"]["matchLabels"]
        target = node if pdb == "stowage-node" else gateway
        assert selector.items() <= target["spec"]["template"]["metadata"]["labels"].items()

    # The gateway's node file, with the DNS name its pod gets, is one the server accepts, pointed at the headless Service.
    env = {e["name"]: e["value"] for e in gateway["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    dns_name = env["INFERENCE_SERVER_GATEWAY_DISCOVERY_DNS_NAME"].replace("$(POD_NAMESPACE)", "models")
    assert dns_name == f"{headless['metadata']['name']}.models.svc.cluster.local"
    result = check_config(r["ConfigMap", "stowage-gateway"]["data"]["node.yaml"], tmp_path, {"INFERENCE_SERVER_GATEWAY_DISCOVERY_DNS_NAME": dns_name})
    assert result.returncode == 0, result.stderr
    effective_gateway = json.loads(result.stdout)["config"]["gateway"]
    effective = effective_gateway["discovery"]
    assert effective["dns_name"] == dns_name
    # Two gateway replicas that pool the fleet's memory by default (they place alike from what the nodes report).
    assert effective_gateway["scheduling"]["mode"] == "pooled" and gateway["spec"]["replicas"] == 2
    assert effective["port"] == next(p["port"] for p in headless["spec"]["ports"] if p["name"] == "grpc")
    assert effective["metrics_port"] == next(p["port"] for p in headless["spec"]["ports"] if p["name"] == "admin")


def test_overlays_change_the_knobs_users_change(tools, tmp_path):
    production = resources(tools, "deploy/kubernetes/overlays/production")
    node = production["StatefulSet", "stowage-node"]
    container = node["spec"]["template"]["spec"]["containers"][0]
    assert node["metadata"]["namespace"] == "models" and node["spec"]["replicas"] == 4
    assert container["image"] == "registry.example.com/ml/stowage:0.1.0"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert node["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "lab-model-repository"
    cpu = resources(tools, "deploy/kubernetes/overlays/cpu")["StatefulSet", "stowage-node"]
    cpu_container = cpu["spec"]["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in cpu_container["resources"].get("limits", {})
    # The settings it gives as environment variables are ones the server knows.
    env = {e["name"]: e["value"] for e in cpu_container["env"]}
    result = check_config((ROOT / "docker" / "node.yaml").read_text(), tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["global"]["runtime"]["cpu_device_memory_bytes"] == 268435456


def test_the_kserve_runtime_is_what_kserve_selects_and_the_server_accepts(tools, tmp_path):
    r = resources(tools, "deploy/kserve")
    runtime = r["ServingRuntime", "stowage"]["spec"]
    assert runtime["multiModel"] is False and runtime["protocolVersions"] == ["v2", "grpc-v2"]
    assert [f["name"] for f in runtime["supportedModelFormats"]] == ["onnx"]
    container = runtime["containers"][0]
    assert container["name"] == "kserve-container"
    # Both data planes its protocolVersions promise: REST first (the predictor service's port), gRPC as h2c.
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [("http1", 8000), ("h2c", 8001)]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["INFERENCE_SERVER_MODEL_REPO"] == "/mnt/models"
    result = check_config((ROOT / "docker" / "node.yaml").read_text(), tmp_path, env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["model_repo"] == "/mnt/models"
    isvc = r["InferenceService", "stowage-lab"]["spec"]["predictor"]["model"]
    assert isvc["runtime"] == "stowage" and isvc["modelFormat"]["name"] == "onnx" and isvc["protocolVersion"] == "grpc-v2"


def test_the_keda_example_scales_the_node_statefulset_on_a_metric_the_server_serves(tools):
    scaled = resources(tools, "deploy/keda")["ScaledObject", "stowage-node"]
    nodes = resources(tools, "deploy/kubernetes/base")
    target = scaled["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) in nodes
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    served = (ROOT / "src" / "node" / "metrics.ts").read_text()
    metric = query.split("(")[1].split(")")[0].split("{")[0]
    assert f"name: '{metric}'" in served, f"{metric} is not a metric the server exposes"
    bad = render(tools, "deploy/keda").replace("minReplicaCount: 1", "minReplicaCount: one")
    assert kubeconform(tools, bad).returncode != 0, "KEDA's schema refuses a wrong type"
