"""Static checks of the container and Kubernetes deployment (no Docker engine needed).

What runs here, against the files in docker/, docker-compose.yml, .env and deploy/k8s/:
- the compose file through the real Docker Compose CLI (`docker-compose config`, no engine
  involved), for the default (`gpu`) and the `cpu` profile;
- hadolint on every Dockerfile, shellcheck on every shell script;
- the scripts the containers run, run here the same way: docker/flink-conf/apply.sh against the
  PyFlink wheel's own bin/config-parser-utils.sh, and docker/submit.sh against a local HTTP
  server with a stand-in `flink` that records its arguments;
- every Flink option key we set, compared with the key Flink's own ConfigOption gives (a JVM
  through PyFlink's gateway), and the plugin jars and classes named, found in the wheel.
Tools missing here are skipped with the reason; .ci/run installs them.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "docker" / "Dockerfile"
CONF_DIR = REPO / "docker" / "flink-conf"
K8S_DIR = REPO / "deploy" / "k8s"
# Where the image puts the container scripts (docker/Dockerfile: COPY docker/... /opt/dspark/docker/...) and
# the job, where the Flink Kubernetes Operator and `flink run` look for a job's files.
IMAGE_REPO = "/opt/dspark"
IMAGE_FLINK_HOME = "/opt/flink"
JOB_IN_IMAGE = f"{IMAGE_FLINK_HOME}/usrlib/features.py"
STANDIN_DOCKERFILE = REPO / "docker" / "standin" / "Dockerfile"


def _pyflink_home() -> Path:
    spec = importlib.util.find_spec("pyflink")
    if spec is None or spec.origin is None:
        pytest.skip("apache-flink is not installed")
    return Path(spec.origin).parent


def _tool(name: str) -> str:
    """A CLI installed on PATH or beside this interpreter (a venv's bin/), else skip."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed (.ci/run installs it; see docs/docker.md)")
    return found


def _read_flat_conf(path: Path) -> dict[str, str]:
    """docker/flink-conf/*.yaml: flat `key: value` lines, as apply.sh reads them."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(":")
        assert key.strip() not in out, f"{path.name}: {key} set twice"
        out[key.strip()] = value.strip()
    return out


def _entrypoint_properties(text: str) -> dict[str, str]:
    """FLINK_PROPERTIES as the official image's docker-entrypoint.sh reads it
    (process_flink_properties): every blank removed, key up to the first ':'."""
    out: dict[str, str] = {}
    for line in text.split("\n"):
        prop = re.sub(r"\s", "", line)
        if not prop:
            continue
        key, _, value = prop.partition(":")
        out[key] = value
    return out


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = str(value)
    return out


def _k8s_docs(variant: str = "cpu") -> list[dict[str, Any]]:
    """What `kubectl apply -k deploy/k8s/VARIANT` applies: the cpu base's resources, and for `gpu` the same
    with its overlay's JSON patches (RFC 6902, as Kustomize applies them) on their targets."""
    base = K8S_DIR / "cpu"
    kustomization = yaml.safe_load((base / "kustomization.yaml").read_text(encoding="utf-8"))
    docs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        docs.extend(d for d in yaml.safe_load_all((base / name).read_text(encoding="utf-8")) if d)
    if variant == "cpu":
        return docs
    overlay = yaml.safe_load((K8S_DIR / variant / "kustomization.yaml").read_text(encoding="utf-8"))
    assert overlay["resources"] == ["../cpu"]
    for patch in overlay["patches"]:
        target = patch["target"]
        (doc,) = [
            d for d in docs if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        ]  # exactly one target
        assert doc["apiVersion"].split("/")[0] == target["group"]
        docs[docs.index(doc)] = jsonpatch.apply_patch(doc, yaml.safe_load(patch["patch"]))
    return docs


def _flink_deployment(variant: str = "cpu") -> dict[str, Any]:
    found = [d for d in _k8s_docs(variant) if d.get("kind") == "FlinkDeployment"]
    assert len(found) == 1, f"deploy/k8s/{variant} should make exactly one FlinkDeployment"
    return found[0]


def _compose_properties(config: dict[str, Any]) -> dict[str, str]:
    env = config["services"]["jobmanager"]["environment"]
    return _entrypoint_properties(env["FLINK_PROPERTIES"])


# --------------------------------------------------------------------------------------------
# Compose: the real CLI
# --------------------------------------------------------------------------------------------

# Services each profile brings up; `.env` makes `gpu` the default.
EXPECTED_SERVICES = {
    "gpu": {"results-init", "jobmanager", "taskmanager", "vllm", "submit", "prometheus"},
    "cpu": {"results-init", "jobmanager", "taskmanager-cpu", "simulator", "submit", "prometheus"},
}


def _compose(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # The shell's COMPOSE_* and our .env variables must not leak in: the test checks the defaults.
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("COMPOSE_", "DOCKER_", "VLLM_", "SIMULATOR_", "DSPARK_", "TASKMANAGER_"))
    }
    return subprocess.run(
        [_tool("docker-compose"), "--project-directory", str(REPO), "-f", str(COMPOSE_FILE), *args],
        capture_output=True,
        text=True,
        env={**clean, **(env or {})},
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module", params=["gpu", "cpu"])
def profile(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def compose_config(profile: str) -> dict[str, Any]:
    args = ["--profile", "cpu"] if profile == "cpu" else []
    result = _compose(*args, "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def test_compose_file_is_valid_for_the_compose_spec() -> None:
    result = _compose("config", "--quiet")
    assert result.returncode == 0, result.stderr


def test_cpu_flag_overrides_the_default_profile_in_env() -> None:
    env_lines = (REPO / ".env").read_text(encoding="utf-8").splitlines()
    assert "COMPOSE_PROFILES=gpu" in env_lines
    result = _compose("--profile", "cpu", "config", "--services")
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) == EXPECTED_SERVICES["cpu"]


def test_each_profile_brings_up_its_services(profile: str, compose_config: dict[str, Any]) -> None:
    assert set(compose_config["services"]) == EXPECTED_SERVICES[profile]


def _dockerfile_stages() -> set[str]:
    text = DOCKERFILE.read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M | re.I)}


def test_every_service_has_an_image_and_builds_from_existing_files(compose_config: dict[str, Any]) -> None:
    stages = _dockerfile_stages()
    assert {"cpu", "gpu"} <= stages
    for name, service in compose_config["services"].items():
        assert service.get("image"), f"{name}: no image"
        build = service.get("build")
        if build is None:
            continue
        context = Path(build["context"])
        assert context == REPO, f"{name}: build context should be the repository root"
        assert (context / build["dockerfile"]).is_file(), f"{name}: {build['dockerfile']} missing"
        assert build["target"] in stages, f"{name}: no stage {build['target']!r} in docker/Dockerfile"


def test_bind_mounted_files_exist(compose_config: dict[str, Any]) -> None:
    for name, service in compose_config["services"].items():
        for volume in service.get("volumes", []):
            source = Path(volume.get("source", ""))
            if volume["type"] == "bind" and volume.get("read_only"):
                assert source.exists(), f"{name}: {source} does not exist"


def test_results_land_in_the_bind_mounted_results_dir(compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    writers = [n for n in services if n.startswith("taskmanager")] + ["submit", "results-init"]
    for name in writers:
        mounts = {(v["source"], v["target"]) for v in services[name]["volumes"] if v["type"] == "bind"}
        assert (str(REPO / "results"), "/results") in mounts, f"{name} does not mount ./results"
    assert services["submit"]["environment"]["DSPARK_OUTPUT"] == "/results"


def test_gpu_services_reserve_one_nvidia_gpu(profile: str, compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    if profile == "cpu":
        assert "devices" not in json.dumps(services), "the cpu profile must run without any GPU"
        return
    for name in ("vllm", "taskmanager"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1, name
        device = devices[0]
        assert device["driver"] == "nvidia"
        assert device["capabilities"] == ["gpu"]
        assert len(device.get("device_ids", [])) == 1 or device.get("count") == 1, name


def _docs_override(tmp_path: Path, service: str) -> dict[str, Any]:
    """The services `docker compose config` makes of the compose file and docs/docker.md's override that adds
    `service`."""
    docs = (REPO / "docs" / "docker.md").read_text(encoding="utf-8")
    (snippet,) = [b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if re.search(rf"^\s*{service}:", b, re.M)]
    override = tmp_path / "docker-compose.override.yml"
    override.write_text(textwrap.dedent(snippet).replace("file: docker-compose.yml", f"file: {COMPOSE_FILE}"))
    result = _compose("-f", str(override), "config", "--format", "json")
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout)["services"])


def test_docs_multi_gpu_override_gives_its_taskmanager_one_other_gpu(tmp_path: Path) -> None:
    services = _docs_override(tmp_path, "taskmanager-gpu2")
    reserved = {
        name: [d["device_ids"] for d in s["deploy"]["resources"]["reservations"]["devices"]]
        for name, s in services.items()
        if name.startswith("taskmanager")
    }
    assert reserved == {"taskmanager": [["0"]], "taskmanager-gpu2": [["2"]]}


def test_docs_second_vllm_replica_has_its_own_gpu_and_answers_as_vllm(tmp_path: Path) -> None:
    services = _docs_override(tmp_path, "vllm-gpu1")
    first, second = services["vllm"], services["vllm-gpu1"]
    devices = {name: [d["device_ids"] for d in s["deploy"]["resources"]["reservations"]["devices"]]
               for name, s in (("vllm", first), ("vllm-gpu1", second))}  # fmt: skip
    assert devices == {"vllm": [["0"]], "vllm-gpu1": [["1"]]}
    # The job's endpoint, http://vllm:8000, resolves to both: the service's name and the alias.
    assert "vllm" in second["networks"]["default"]["aliases"]
    assert second["command"] == first["command"] and second["image"] == first["image"]
    assert second["profiles"] == ["gpu"] and second["deploy"]["replicas"] == 1


def _port_range(service: dict[str, Any]) -> int:
    """How many host ports the service's port 8000 may take: one for each replica."""
    (port,) = [p for p in service["ports"] if int(p["target"]) == 8000]
    first, _, last = str(port["published"]).partition("-")
    assert port["host_ip"] == "127.0.0.1"
    return int(last or first) - int(first) + 1


def test_the_model_server_runs_as_replicas_behind_the_name_vllm() -> None:
    cpu = json.loads(_compose("--profile", "cpu", "config", "--format", "json").stdout)["services"]
    simulator = cpu["simulator"]
    # Two simulators answer as `vllm`, the job's endpoint; each one has a host port of the range.
    assert simulator["deploy"]["replicas"] == 2 and "vllm" in simulator["networks"]["default"]["aliases"]
    assert _port_range(simulator) >= 2
    assert cpu["submit"]["environment"]["DSPARK_ENDPOINT"] == "http://vllm:8000"
    gpu = json.loads(_compose("config", "--format", "json").stdout)["services"]
    assert gpu["vllm"]["deploy"]["replicas"] == 1  # one GPU for vLLM unless asked
    two = json.loads(_compose("config", "--format", "json", env={"VLLM_REPLICAS": "2"}).stdout)["services"]
    assert two["vllm"]["deploy"]["replicas"] == 2 and _port_range(two["vllm"]) >= 2
    assert two["vllm"]["deploy"]["resources"] == gpu["vllm"]["deploy"]["resources"]


def test_vllm_model_is_set_in_one_place() -> None:
    env = (REPO / ".env").read_text(encoding="utf-8")
    compose = COMPOSE_FILE.read_text(encoding="utf-8")
    for variable in ("VLLM_MODEL", "VLLM_SERVED_MODEL_NAME"):
        assert len(re.findall(rf"^{variable}=\S+", env, re.M)) == 1, variable
        assert compose.count("${" + variable) == 1, f"{variable} used more than once in compose"
    result = _compose("config", "--format", "json", env={"VLLM_MODEL": "org/other-model"})
    command = json.loads(result.stdout)["services"]["vllm"]["command"]
    assert command[command.index("--model") + 1] == "org/other-model"


def test_simulator_stands_in_for_vllm_at_the_same_address(profile: str, compose_config: dict[str, Any]) -> None:
    services = compose_config["services"]
    if profile == "gpu":
        assert services["vllm"]["image"].startswith("vllm/vllm-openai:")
        assert "8000" in services["vllm"]["command"]
        return
    simulator = services["simulator"]
    assert "vllm" in simulator["networks"]["default"]["aliases"]
    command = simulator["entrypoint"] + simulator["command"]
    assert command[:2] == ["dspark-vllm", "simulate"]
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert command[command.index("--port") + 1] == "8000"
    assert command[command.index("--profile") + 1] == "coder"


def test_submit_runs_the_job_from_the_repository(compose_config: dict[str, Any]) -> None:
    submit = compose_config["services"]["submit"]
    (entrypoint,) = submit["entrypoint"]
    assert entrypoint.startswith(IMAGE_REPO + "/")
    script = REPO / entrypoint.removeprefix(IMAGE_REPO + "/")
    assert script.is_file() and os.access(script, os.X_OK), f"{script} missing or not executable"
    env = submit["environment"]
    assert env["DSPARK_JOB"] == JOB_IN_IMAGE
    assert env["DSPARK_ENDPOINT"] == "http://vllm:8000"
    assert env["FLINK_JOBMANAGER"] == "jobmanager:8081"
    assert "8081" in {p["target"] for p in compose_config["services"]["jobmanager"]["ports"]} or any(
        str(p.get("target")) == "8081" for p in compose_config["services"]["jobmanager"]["ports"]
    )


def test_the_image_puts_the_jobs_where_compose_and_kubernetes_run_them() -> None:
    copies = re.findall(r"^COPY (jobs/\S+(?: jobs/\S+)*) (\S+)$", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    ((sources, target),) = copies
    assert target == str(Path(JOB_IN_IMAGE).parent) + "/"
    assert "jobs/features.py" in sources.split()
    for source in sources.split():
        assert (REPO / source).is_file(), source


def test_flink_properties_survive_the_image_entrypoint(compose_config: dict[str, Any]) -> None:
    text = compose_config["services"]["jobmanager"]["environment"]["FLINK_PROPERTIES"]
    # The entrypoint strips every blank and never skips comments: a comment line becomes a key.
    for line in text.splitlines():
        assert not line.strip().startswith("#"), f"comment in FLINK_PROPERTIES: {line}"
        if line.strip():
            assert ":" in line, f"not a key: value line: {line}"
    properties = _entrypoint_properties(text)
    assert all(properties.values()), properties
    # Flink re-nests dotted keys: a key that is a path prefix of another cannot hold a value.
    for key in properties:
        clashes = [other for other in properties if other.startswith(key + ".")]
        assert not clashes, f"{key} is a prefix of {clashes}"


# --------------------------------------------------------------------------------------------
# Flink configuration: keys, plugins, and the merge the images do
# --------------------------------------------------------------------------------------------

# Every option key this deployment sets, and the Java expression that gives Flink's own key for
# it. A new key must be added here, so that a typo cannot slip through as an ignored option.
_J = "org.apache.flink.configuration"
FLINK_KEYS = {
    "python.executable": "org.apache.flink.python.PythonOptions.PYTHON_EXECUTABLE.key()",
    "python.client.executable": "org.apache.flink.python.PythonOptions.PYTHON_CLIENT_EXECUTABLE.key()",
    "metrics.reporter.prom.factory.class": (
        f"{_J}.ConfigConstants.METRICS_REPORTER_PREFIX + 'prom.' + {_J}.MetricOptions.REPORTER_FACTORY_CLASS.key()"
    ),
    "metrics.reporter.prom.port": f"{_J}.ConfigConstants.METRICS_REPORTER_PREFIX + 'prom.port'",
    "external-resources": f"{_J}.ExternalResourceOptions.EXTERNAL_RESOURCE_LIST.key()",
    "external-resource.gpu.amount": f"{_J}.ExternalResourceOptions.getAmountConfigOptionForResource('gpu')",
    "external-resource.gpu.driver-factory.class": (
        f"{_J}.ExternalResourceOptions.getExternalResourceDriverFactoryConfigOptionForResource('gpu')"
    ),
    "external-resource.gpu.param.discovery-script.path": (
        f"{_J}.ExternalResourceOptions.getExternalResourceParamConfigPrefixForResource('gpu') + 'discovery-script.path'"
    ),
    "external-resource.gpu.kubernetes.config-key": (
        f"{_J}.ExternalResourceOptions.getSystemConfigKeyConfigOptionForResource('gpu', 'kubernetes.config-key')"
    ),
    "jobmanager.memory.process.size": f"{_J}.JobManagerOptions.TOTAL_PROCESS_MEMORY.key()",
    "taskmanager.memory.process.size": f"{_J}.TaskManagerOptions.TOTAL_PROCESS_MEMORY.key()",
    "taskmanager.numberOfTaskSlots": f"{_J}.TaskManagerOptions.NUM_TASK_SLOTS.key()",
    "parallelism.default": f"{_J}.CoreOptions.DEFAULT_PARALLELISM.key()",
    "execution.checkpointing.dir": f"{_J}.CheckpointingOptions.CHECKPOINTS_DIRECTORY.key()",
    "execution.checkpointing.savepoint-dir": f"{_J}.CheckpointingOptions.SAVEPOINT_DIRECTORY.key()",
    "execution.checkpointing.interval": f"{_J}.CheckpointingOptions.CHECKPOINTING_INTERVAL.key()",
    "high-availability.type": f"{_J}.HighAvailabilityOptions.HA_MODE.key()",
    "high-availability.storageDir": f"{_J}.HighAvailabilityOptions.HA_STORAGE_PATH.key()",
}

_GATEWAY_SCRIPT = """
import json, sys
from pyflink.java_gateway import get_gateway
org = get_gateway().jvm.org
print(json.dumps({k: str(eval(v)) for k, v in json.loads(sys.argv[1]).items()}))
"""


def _all_keys_we_set() -> dict[str, set[str]]:
    where: dict[str, set[str]] = {}
    for path in sorted(CONF_DIR.glob("*.yaml")):
        for key in _read_flat_conf(path):
            where.setdefault(key, set()).add(f"docker/flink-conf/{path.name}")
    compose = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    props = compose["x-flink-properties"]["FLINK_PROPERTIES"]
    for key in _entrypoint_properties(props):
        where.setdefault(key, set()).add("docker-compose.yml")
    for variant in ("cpu", "gpu"):
        for key in _flink_deployment(variant)["spec"]["flinkConfiguration"]:
            where.setdefault(key, set()).add(f"deploy/k8s/{variant}")
    return where


def test_every_key_we_set_is_listed() -> None:
    unknown = {k: sorted(v) for k, v in _all_keys_we_set().items() if k not in FLINK_KEYS}
    assert not unknown, f"add these to FLINK_KEYS with the ConfigOption they name: {unknown}"


@pytest.mark.slow
def test_keys_are_the_ones_flink_defines() -> None:
    _pyflink_home()
    result = subprocess.run(
        [sys.executable, "-c", _GATEWAY_SCRIPT, json.dumps(FLINK_KEYS)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    flink_says = json.loads(result.stdout.strip().splitlines()[-1])
    assert flink_says == {k: k for k in FLINK_KEYS}


def _jar_has(jar: Path, member: str, text: bytes | None = None) -> bool:
    with zipfile.ZipFile(jar) as zf:
        if member not in zf.namelist():
            return False
        return text is None or text in zf.read(member)


def test_plugins_and_classes_named_in_the_config_exist_in_flink() -> None:
    home = _pyflink_home()
    common = _read_flat_conf(CONF_DIR / "common.yaml")
    gpu = _read_flat_conf(CONF_DIR / "gpu.yaml")

    (prom_jar,) = (home / "plugins" / "metrics-prometheus").glob("flink-metrics-prometheus-*.jar")
    factory = common["metrics.reporter.prom.factory.class"].replace(".", "/") + ".class"
    # The factory reads the reporter's own argument `port` (metrics.reporter.<name>.port).
    assert _jar_has(prom_jar, factory, b"port")

    (gpu_jar,) = (home / "plugins" / "external-resource-gpu").glob("flink-external-resource-gpu-*.jar")
    assert _jar_has(gpu_jar, gpu["external-resource.gpu.driver-factory.class"].replace(".", "/") + ".class")
    assert _jar_has(gpu_jar, "org/apache/flink/externalresource/gpu/GPUDriverOptions.class", b"discovery-script.path")
    script = gpu["external-resource.gpu.param.discovery-script.path"]
    assert script.startswith(IMAGE_FLINK_HOME + "/")
    assert (home / script.removeprefix(IMAGE_FLINK_HOME + "/")).is_file()


def _fake_flink_home(tmp_path: Path) -> Path:
    """The wheel's Flink, with a conf/ of our own: what the image has under /opt/flink."""
    home = _pyflink_home()
    fake = tmp_path / "flink"
    fake.mkdir()
    for part in ("bin", "opt", "plugins"):
        (fake / part).symlink_to(home / part)
    # config.sh looks for flink-dist*.jar with `find lib/`, which does not enter a linked dir.
    (fake / "lib").mkdir()
    for jar in (home / "lib").iterdir():
        (fake / "lib" / jar.name).symlink_to(jar)
    shutil.copytree(home / "conf", fake / "conf")
    return fake


def _run_apply(flink_home: Path, *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CONF_DIR / "apply.sh"), *map(str, files)],
        env={**os.environ, "FLINK_HOME": str(flink_home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_apply_sh_merges_the_baked_config_with_flinks_parser(tmp_path: Path) -> None:
    flink_home = _fake_flink_home(tmp_path)
    files = [CONF_DIR / "common.yaml", CONF_DIR / "gpu.yaml"]
    result = _run_apply(flink_home, *files)
    assert result.returncode == 0, result.stdout + result.stderr
    merged = _flatten(yaml.safe_load((flink_home / "conf" / "config.yaml").read_text(encoding="utf-8")))
    for path in files:
        for key, value in _read_flat_conf(path).items():
            assert merged.get(key) == value, f"{key}: {merged.get(key)!r} != {value!r}"
    # What was there before is kept.
    assert merged["jobmanager.rpc.port"] == "6123"


@pytest.mark.slow
def test_compose_flink_properties_merge_like_the_entrypoint(tmp_path: Path) -> None:
    """The image's entrypoint hands FLINK_PROPERTIES to the same parser as `-Dkey=value`."""
    flink_home = _fake_flink_home(tmp_path)
    config = _compose("config", "--format", "json")
    properties = _compose_properties(json.loads(config.stdout))
    lines = tmp_path / "properties.yaml"
    lines.write_text("".join(f"{k}: {v}\n" for k, v in properties.items()), encoding="utf-8")
    result = _run_apply(flink_home, CONF_DIR / "common.yaml", lines)
    assert result.returncode == 0, result.stdout + result.stderr
    merged = _flatten(yaml.safe_load((flink_home / "conf" / "config.yaml").read_text(encoding="utf-8")))
    for key, value in properties.items():
        assert merged.get(key) == value, key


@pytest.mark.slow
def test_apply_sh_fails_when_flinks_parser_fails(tmp_path: Path) -> None:
    """config-parser-utils.sh itself exits 0 and writes its error into config.yaml."""
    flink_home = _fake_flink_home(tmp_path)
    for jar in (flink_home / "lib").glob("flink-dist*.jar"):
        jar.unlink()
    before = (flink_home / "conf" / "config.yaml").read_text(encoding="utf-8")
    result = _run_apply(flink_home, CONF_DIR / "common.yaml")
    assert result.returncode == 1
    assert "Flink could not merge" in result.stderr
    assert (flink_home / "conf" / "config.yaml").read_text(encoding="utf-8") == before


def test_apply_sh_rejects_a_line_without_a_value(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("python.executable\n", encoding="utf-8")
    result = _run_apply(tmp_path, bad)
    assert result.returncode == 2
    assert "not a 'key: value' line" in result.stderr


# --------------------------------------------------------------------------------------------
# docker/submit.sh, run here
# --------------------------------------------------------------------------------------------


class _Cluster(BaseHTTPRequestHandler):
    """Answers like a JobManager's REST API and an OpenAI-compatible server."""

    ready = True
    gpus = 0.0  # what the one TaskManager advertises (Flink's external resource `gpu`)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        resource = {"cpuCores": 2.0, "extendedResources": {"gpu": self.gpus} if self.gpus else {}}
        routes = {
            "/overview": {"taskmanagers": 1 if self.ready else 0, "slots-total": 2},
            "/taskmanagers": {"taskmanagers": [{"id": "tm-1", "totalResource": resource}]},
            "/v1/models": {"object": "list", "data": [{"id": "qwen2.5-coder-1.5b", "object": "model"}]},
        }
        if self.path not in routes:
            self.send_error(404)
            return
        body = json.dumps(routes[self.path]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@pytest.fixture
def cluster() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Cluster)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _run_submit(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    record = tmp_path / "flink-args.json"
    stub = bin_dir / "flink"
    stub.write_text(
        f'#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, "w"))\n',
        encoding="utf-8",
    )
    stub.chmod(0o755)
    return subprocess.run(
        ["bash", str(REPO / "docker" / "submit.sh"), *args],
        env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "DSPARK_PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_submit_waits_then_runs_flink_run_with_the_job(tmp_path: Path, cluster: str) -> None:
    endpoint = f"http://{cluster}"
    result = _run_submit(tmp_path, {"FLINK_JOBMANAGER": cluster, "DSPARK_ENDPOINT": endpoint}, "--print")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Flink cluster ready" in result.stdout and "model endpoint ready" in result.stdout
    args = json.loads((tmp_path / "flink-args.json").read_text(encoding="utf-8"))
    assert args == [
        "run", "-m", cluster, "-py", JOB_IN_IMAGE,
        "--endpoint", endpoint, "--output", "/results", "--profile", "coder", "--backend", "cpu",
        "--print",
    ]  # fmt: skip
    # No --duration by default: the job runs until it is cancelled. No GPU on the TaskManagers: the
    # cpu backend, whose parse step runs in their JVM.
    assert "submit: --backend cpu" in result.stdout


def test_submit_asks_for_the_gpu_when_a_taskmanager_has_one(tmp_path: Path, cluster: str, monkeypatch) -> None:
    monkeypatch.setattr(_Cluster, "gpus", 1.0)
    result = _run_submit(tmp_path, {"FLINK_JOBMANAGER": cluster, "DSPARK_ENDPOINT": f"http://{cluster}"})
    assert result.returncode == 0, result.stdout + result.stderr
    args = json.loads((tmp_path / "flink-args.json").read_text(encoding="utf-8"))
    assert args[args.index("--backend") + 1] == "gpu"
    given = _run_submit(
        tmp_path, {"FLINK_JOBMANAGER": cluster, "DSPARK_ENDPOINT": f"http://{cluster}", "DSPARK_BACKEND": "auto"}
    )
    assert given.returncode == 0, given.stdout + given.stderr
    args = json.loads((tmp_path / "flink-args.json").read_text(encoding="utf-8"))
    assert args[args.index("--backend") + 1] == "auto"


def test_submit_passes_parallelism_and_can_run_unbounded(tmp_path: Path, cluster: str) -> None:
    env = {
        "FLINK_JOBMANAGER": cluster,
        "DSPARK_ENDPOINT": f"http://{cluster}",
        "DSPARK_PARALLELISM": "4",
        "DSPARK_DURATION": "",
    }
    result = _run_submit(tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    args = json.loads((tmp_path / "flink-args.json").read_text(encoding="utf-8"))
    assert args[:5] == ["run", "-m", cluster, "-p", "4"]
    assert "--duration" not in args


def test_submit_gives_up_with_a_reason_when_the_endpoint_never_answers(tmp_path: Path, cluster: str) -> None:
    env = {"FLINK_JOBMANAGER": cluster, "DSPARK_ENDPOINT": "http://127.0.0.1:9", "DSPARK_WAIT_TIMEOUT": "1"}
    result = _run_submit(tmp_path, env)
    assert result.returncode != 0
    assert "gave up after 1 s waiting for model endpoint at http://127.0.0.1:9/v1/models" in result.stderr
    assert not (tmp_path / "flink-args.json").exists()


@pytest.mark.slow
def test_flink_run_options_used_exist_in_flink_run_help() -> None:
    home = _pyflink_home()
    result = subprocess.run(
        ["bash", str(home / "bin" / "flink"), "run", "--help"],
        env={**os.environ, "FLINK_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    help_text = result.stdout + result.stderr
    for option in (
        "-m,--jobmanager",
        "-py,--python",
        "-p,--parallelism",
        "-pyclientexec,--pyClientExecutable",
    ):
        assert option in help_text, option


def test_job_accepts_the_arguments_submit_passes() -> None:
    job = REPO / "jobs" / "features.py"
    if not job.exists():
        pytest.skip("jobs/features.py is not on this branch yet")
    result = subprocess.run(
        [sys.executable, str(job), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    for flag in ("--endpoint", "--output", "--profile", "--duration"):
        assert flag in result.stdout, flag


# --------------------------------------------------------------------------------------------
# Linters
# --------------------------------------------------------------------------------------------

DOCKERFILES = sorted(p for p in (REPO / "docker").rglob("*") if p.name == "Dockerfile" or p.suffix == ".Dockerfile")
SHELL_SCRIPTS = (
    sorted((REPO / "docker").rglob("*.sh")) + sorted((REPO / "deploy").rglob("*.sh")) + [REPO / ".ci" / "run"]
)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_hadolint(dockerfile: Path) -> None:
    result = subprocess.run(
        [_tool("hadolint"), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shellcheck(script: Path) -> None:
    result = subprocess.run([_tool("shellcheck"), str(script)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_pins_match_the_project() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert "ARG FLINK_IMAGE=flink:2.3.0-scala_2.12-java17" in text
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    (flink_pin,) = re.findall(r'"apache-flink==([^"]+)"', pyproject)
    assert f"ARG APACHE_FLINK_VERSION={flink_pin}" in text
    # The image takes the base's Python when requires-python allows it, and checks the same range.
    (low, high) = re.findall(r'requires-python = ">=3\.(\d+),<3\.(\d+)"', pyproject)[0]
    assert f"assert (3, {low}) <= sys.version_info[:2] <= (3, {int(high) - 1})" in text
    # Every repository file the Dockerfile runs from /opt/dspark exists.
    for path in re.findall(rf"{IMAGE_REPO}/([\w./-]+\.(?:sh|yaml))", text):
        assert (REPO / path).is_file(), path


def _ignored_by_dockerignore(path: str) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents decides; '!' keeps."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        keep = pattern.startswith("!")
        glob = pattern.removeprefix("!").removeprefix("**/")
        if any(fnmatch.fnmatchcase(p, glob) or fnmatch.fnmatchcase(p.split("/")[-1], glob) for p in prefixes):
            ignored = not keep
    return ignored


def test_dockerignore_keeps_what_the_images_copy_and_nothing_secret() -> None:
    # One .dockerignore at the root: the classic builder (Compose without buildx) reads no Dockerfile.dockerignore.
    assert not list((REPO / "docker").rglob("*.dockerignore"))
    copied = []
    for dockerfile in (DOCKERFILE, STANDIN_DOCKERFILE):
        for line in re.findall(r"^COPY (?!--from)(.+)$", dockerfile.read_text(encoding="utf-8"), re.M):
            *sources, _ = [w for w in line.split() if not w.startswith("--")]
            copied += sources
    assert {"pyproject.toml", "java", "connector", "schemas", "jobs/features.py", "docker/wheels/"} <= set(copied)
    for source in copied:
        # A wildcard stands for files in its folder: check the folder.
        path = source.rstrip("/") if "*" not in source else source.rsplit("/", 1)[0]
        assert not _ignored_by_dockerignore(path), source
    # .env may carry HF_TOKEN: never in a build context. The jar is compiled by the image's own build.
    for secret_or_local in (".env", ".git/config", ".venv/bin/python", "results/x", "connector/flink/jars/a.jar"):
        assert _ignored_by_dockerignore(secret_or_local), secret_or_local
    assert not _ignored_by_dockerignore("connector/plan/table.py")


# --------------------------------------------------------------------------------------------
# Prometheus and Kubernetes
# --------------------------------------------------------------------------------------------


def test_prometheus_scrapes_flink_and_vllm_where_compose_runs_them() -> None:
    prom = yaml.safe_load((REPO / "docker" / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    compose = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    services = set(compose["services"]) | {"vllm"}  # the simulator's alias
    reporter_port = _read_flat_conf(CONF_DIR / "common.yaml")["metrics.reporter.prom.port"]
    jobs = {job["job_name"]: job for job in prom["scrape_configs"]}
    assert set(jobs) == {"flink-jobmanager", "flink-taskmanager", "vllm"}
    assert jobs["flink-jobmanager"]["static_configs"][0]["targets"] == [f"jobmanager:{reporter_port}"]
    (dns,) = jobs["flink-taskmanager"]["dns_sd_configs"]
    assert str(dns["port"]) == reporter_port
    assert set(dns["names"]) == {s for s in services if s.startswith("taskmanager")}
    # Each model server replica is a target of its own: the name resolves to all of them.
    (dns,) = jobs["vllm"]["dns_sd_configs"]
    assert dns["names"] == ["vllm"] and dns["type"] == "A" and str(dns["port"]) == "8000"
    for job in jobs.values():
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                assert target.split(":")[0] in services, target


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_flink_deployment_runs_the_python_job(variant: str) -> None:
    deployment = _flink_deployment(variant)
    assert deployment["apiVersion"] == "flink.apache.org/v1beta1"
    spec = deployment["spec"]
    for field in (
        "image",
        "flinkVersion",
        "serviceAccount",
        "flinkConfiguration",
        "jobManager",
        "taskManager",
        "job",
    ):
        assert field in spec, field
    assert spec["flinkVersion"] == "v2_3"
    job = spec["job"]
    assert job["entryClass"] == "org.apache.flink.client.python.PythonDriver"
    # A checkpointed job keeps its state across upgrades: last-state (with HA) or savepoint, not stateless.
    assert job["upgradeMode"] in {"savepoint", "last-state"} and job["state"] == "running"
    config = spec["flinkConfiguration"]
    assert config["high-availability.type"] == "kubernetes"
    for key in ("high-availability.storageDir", "execution.checkpointing.dir", "execution.checkpointing.savepoint-dir"):
        assert config[key].startswith("file:///flink-data/"), key  # the shared claim
    assert "--duration" not in job["args"]  # runs until suspended
    jar = job["jarURI"]
    assert jar.startswith(f"local://{IMAGE_FLINK_HOME}/opt/")
    wheel_jar = _pyflink_home() / "opt" / Path(jar).name
    assert wheel_jar.is_file(), f"{Path(jar).name} is not in the distribution's opt/"
    assert _jar_has(wheel_jar, job["entryClass"].replace(".", "/") + ".class")
    args = job["args"]
    assert args[args.index("-py") + 1] == JOB_IN_IMAGE
    config = spec["flinkConfiguration"]
    assert args[args.index("-pyclientexec") + 1] == config["python.client.executable"]
    for flag in ("--endpoint", "--output", "--profile"):
        assert flag in args, flag


@pytest.mark.parametrize("variant, baked", [("cpu", ["common.yaml"]), ("gpu", ["common.yaml", "gpu.yaml"])])
def test_flink_deployment_repeats_what_the_image_bakes_in(variant: str, baked: list[str]) -> None:
    config = {k: str(v) for k, v in _flink_deployment(variant)["spec"]["flinkConfiguration"].items()}
    for name in baked:
        for key, value in _read_flat_conf(CONF_DIR / name).items():
            assert config.get(key) == value, f"{key} ({name}): {config.get(key)!r} != {value!r}"


def test_the_cpu_flink_deployment_asks_for_no_gpu_and_parses_in_the_jvm() -> None:
    """Where no GPU is used, the TaskManagers run the parse step in their JVM: the cpu image, no
    GPU anywhere in the spec, and the job's `--backend cpu` (tests/test_docker.py runs that path for real)."""
    spec = _flink_deployment("cpu")["spec"]
    assert spec["image"].endswith("-cpu")
    assert "gpu" not in json.dumps(spec).replace("--backend", "")
    args = spec["job"]["args"]
    assert args[args.index("--backend") + 1] == "cpu"
    from jobs import features

    assert not features.gpu_route(features.parse_args(args[args.index("-py") + 2 :]))


def test_flink_deployment_gives_each_taskmanager_one_gpu() -> None:
    spec = _flink_deployment("gpu")["spec"]
    assert spec["image"].endswith("-gpu")
    args = spec["job"]["args"]
    assert args[args.index("--backend") + 1] == "gpu"
    # The job's answers are parsed on the GPU (the model's raw bodies by parse_<profile> in the Python workers);
    # before, ML_PREDICT's model parsed them in the JVM whatever --backend said.
    from jobs import features

    assert features.gpu_route(features.parse_args(args[args.index("-py") + 2 :]))
    config = spec["flinkConfiguration"]
    assert config["external-resource.gpu.kubernetes.config-key"] == "nvidia.com/gpu"
    assert str(config["external-resource.gpu.amount"]) == "1"
    (container,) = spec["taskManager"]["podTemplate"]["spec"]["containers"]
    assert container["name"] == "flink-main-container"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert "nvidia.com/gpu" not in json.dumps(spec["jobManager"])


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_flink_deployment_volumes_are_claimed(variant: str) -> None:
    docs = _k8s_docs(variant)
    claims = {d["metadata"]["name"] for d in docs if d.get("kind") == "PersistentVolumeClaim"}
    template = _flink_deployment(variant)["spec"]["podTemplate"]["spec"]
    used = {v["persistentVolumeClaim"]["claimName"] for v in template["volumes"]}
    assert used <= claims
    (container,) = template["containers"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/results", "/flink-data"} <= mounts


def test_scripts_stop_only_what_they_started_by_pid() -> None:
    """.ci/run stopped vLLM with `pkill -f`, which ends any matching process on a shared machine."""
    scripts = [*SHELL_SCRIPTS, *(REPO / "tests").rglob("*.sh"), *(REPO / "jobs").rglob("*.sh")]
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        assert not re.search(r"\b(pkill|killall)\b", text), script
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "VLLM_PIDFILE=" in ci and 'kill -TERM "$pid"' in ci
    assert 'echo "$PID" >"$PIDFILE"' in (REPO / "tests" / "vllm_cpu" / "start_vllm_cpu.sh").read_text(encoding="utf-8")
