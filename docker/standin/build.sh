#!/usr/bin/env bash
# Build the stand-in base images where no image registry is reachable, then use them with compose:
#
#   bash docker/standin/build.sh            # once; later runs reuse what is there
#   export FLINK_IMAGE=dspark-vllm/flink-standin:2.3.0 PROMETHEUS_IMAGE=dspark-vllm/prometheus-standin:2.42
#   docker compose --profile cpu up --build
#
# Steps:
#   1. docker/wheels/: `pip wheel` of this project's dependencies and build requirements (to build the
#      project's own wheel inside the image) for PYTHON, which must be the minor version of the base's
#      Python (Debian 12: 3.11); pip's cache makes a second run quick. Beside them RE2's pinned tarball
#      (native/build_native.py --re2-archive, from its cache), which the native core's build takes, and the
#      pinned kafka-clients jar (java/build_jar.py --kafka-clients-jar), which the connector jar's build takes. The project's wheel itself is not
#      there, so that the image layer of the dependencies stays cached while the code changes.
#   2. (skipped when the image exists) dspark-vllm/standin-base:bookworm: `debootstrap --variant=minbase` from the Debian mirror with
#      every package the stand-ins and the images need (Java 17 with javac for the connector's jar, g++
#      for its native parser core,
#      Python 3.11 with venv, unzip, Prometheus), imported with `docker import` (needs root and debootstrap). So no build needs the
#      network: the stand-ins take nothing else, and docker/Dockerfile uses this Python.
#   3. the stand-ins, docker/standin/Dockerfile: Flink (from the apache-flink wheels of step 1) and
#      Prometheus, built with `--network none`.
# Then build the project's images with DSPARK_BUILD_NETWORK=none too (docker-compose.yml), to show
# that they need nothing from outside either.
# Environment: PYTHON (python3.11), DEBIAN_MIRROR (the first deb.debian.org-like URI of
# /etc/apt/sources.list*, else http://deb.debian.org/debian), WITH_GPU=1 to put the `gpu` extra's
# wheels in docker/wheels too (several GB).
set -euo pipefail
cd "$(dirname "$0")/../.."

python="${PYTHON:-python3.11}"
base=dspark-vllm/standin-base:bookworm
packages=openjdk-17-jdk-headless,g++,python3,python3-venv,unzip,prometheus
flink=dspark-vllm/flink-standin:2.3.0
prometheus=dspark-vllm/prometheus-standin:2.42
wheels=docker/wheels

took() { echo "standin: $1 in $((SECONDS - $2)) s"; }

started=$SECONDS
# What the image installs besides this project, and what building the project's wheel needs, from
# pyproject.toml. pip evaluates markers for the Python it runs on: redis (through apache-beam) needs
# async-timeout below Python 3.11.3, and Debian 12's Python is 3.11.2.
requirements=$("$python" - "${WITH_GPU:-}" <<'PY'
import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    pyproject = tomllib.load(f)
needs = pyproject["project"]["dependencies"] + pyproject["build-system"]["requires"] + ["async-timeout>=4.0.3"]
if sys.argv[1] == "1":
    needs += pyproject["project"]["optional-dependencies"]["gpu"]
print("\n".join(needs))
PY
)
"$python" -m pip wheel --quiet --wheel-dir "$wheels" -r /dev/stdin <<<"$requirements"
"$python" native/build_native.py --re2-archive "$wheels"
"$python" java/build_jar.py --kafka-clients-jar "$wheels"
took "wheels for $("$python" --version) in $wheels" "$started"

started=$SECONDS
if ! docker image inspect "$base" >/dev/null 2>&1; then
    mirror="${DEBIAN_MIRROR:-}"
    if [ -z "$mirror" ]; then
        mirror=$(grep -h -o -E 'https?://[^ ]*/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null |
            head -1 | tr -d ' ' || true)
    fi
    mirror="${mirror:-http://deb.debian.org/debian}"
    rootfs=$(mktemp -d)
    debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
        tail -20 "$rootfs.log" >&2
        exit 1
    }
    tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
    rm -rf "$rootfs" "$rootfs.log"
    took "$base from $mirror" "$started"
fi

started=$SECONDS
for target in flink prometheus; do
    image=$flink
    [ "$target" = flink ] || image=$prometheus
    docker build --quiet --network none -f docker/standin/Dockerfile --target "$target" -t "$image" . >/dev/null
done
took "$flink and $prometheus" "$started"
