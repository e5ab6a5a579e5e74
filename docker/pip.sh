#!/usr/bin/env bash
# pip in the image's venv (docker/Dockerfile): from the wheels in /wheels alone when the build context
# brought any (docker/wheels/, no network needed), else from PyPI. The settings are environment
# variables so that pip's isolated build of this project's wheel follows them too.
set -euo pipefail
export PIP_FIND_LINKS=/wheels PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
if compgen -G '/wheels/*.whl' >/dev/null; then
    export PIP_NO_INDEX=1
fi
exec /opt/venv/bin/pip "$@"
