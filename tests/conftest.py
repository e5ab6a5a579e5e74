from __future__ import annotations

import pytest

from connector.decode.readers import select_reader
from connector.errors import BackendUnavailable


def _gpu_skip_reason() -> str | None:
    try:
        select_reader("gpu")
    except BackendUnavailable as exc:
        return f"gpu backend unavailable here: {exc}"
    return None


@pytest.fixture(params=["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def backend(request: pytest.FixtureRequest) -> str:
    """Every deserializer test runs on each backend; gpu is skipped, with the reason, where it cannot run."""
    if request.param == "gpu":
        reason = _gpu_skip_reason()
        if reason:
            pytest.skip(reason)
    return request.param
