"""The base URLs of an endpoint, read the same way by every path that takes one: the 'endpoint' option (its rule
and the request step's URLs the planner writes), discovery (`discover_schema`, `served_models`: `dspark-vllm
columns` and the jobs' model look-up) and discovery's `ClientConfig`. Each path either refuses an endpoint as a
usage error (OptionsError) or asks the same server root; and none repeats a password it was given."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from connector.errors import DsparkError, OptionsError
from connector.options import validate
from connector.plan.contract import client_spec
from connector.profiles import load_profile
from connector.server import ClientConfig
from connector.server.discovery import discover_schema, served_models
from connector.simulator.testing import RunningSimulator, serve_simulator

REQUEST = {"connector": "dspark-vllm", "model": "m", "prompts.rate": "10"}
REFUSED = "refused"

# {h}: the simulator's host:port; {p}: its port. Each is what a user might write for the one server.
ENDPOINTS = [
    "http://{h}",
    "HTTP://{h}",  # a scheme is case-insensitive
    " http://{h} ",
    "http://{h}/",
    "http://{h}/v1",
    "http://{h}/v1/",
    "http://LOCALHOST:{p}",
    "http://user:pw-secret@{h}",
    "http://user:pw-secret/x@{h}",
    "http://user:123/pw-secret@{h}",  # a password with '/' in it: no host 'user' with a path
    "ftp://user:pw-secret@{h}",
    "{h}",
    "http://{h}/v1/chat/completions",
    "http://{h}/v1/completions/",
    "http://{h}/v1?key=pw-secret",
    "http://{h}#pw-secret",
    "http://{h}/a{{x}}",
    "http://{h}/a%zz",
    "http://127.0.0.1:0",
    "http://127.0.0.1:99999",
    "http://[zz]:8000",
    "http://a_b:8000",
    "http://{h},http://{h}/v1",  # one replica named twice
    "http://127.0.0.1,http://127.0.0.1:80",  # the scheme's own port, written and not
    "http://{h},",
]


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with serve_simulator() as running:
        yield running


def _filled(endpoint: str, sim: RunningSimulator) -> str:
    host = sim.url.removeprefix("http://")
    return endpoint.format(h=host, p=host.rpartition(":")[2])


def _by_the_option(endpoint: str) -> str:
    """The server root a table with this 'endpoint' asks first (the request step's URL the plan carries)."""
    try:
        options = validate({**REQUEST, "endpoint": endpoint})
    except OptionsError as exc:
        assert "pw-secret" not in str(exc), exc
        return REFUSED
    return client_spec(options, load_profile("openai"), None).urls[0].removesuffix("/v1/chat/completions")


def _by_discovery(endpoint: str) -> str:
    """The server root discovery asked (`dspark-vllm columns`), or REFUSED for a usage error."""
    try:
        found = discover_schema(endpoint, profile="openai", timeout_s=5)
    except OptionsError as exc:
        assert "pw-secret" not in str(exc), exc
        return REFUSED
    except DsparkError as exc:
        assert "pw-secret" not in str(exc), exc
        return f"failed: {exc}"
    return found.endpoint


def _by_the_client(endpoint: str) -> str:
    try:
        config = ClientConfig(endpoint)
    except OptionsError as exc:
        assert "pw-secret" not in str(exc), exc
        return REFUSED
    return config.root_url


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_every_path_reads_an_endpoint_the_same_way(endpoint: str, sim: RunningSimulator) -> None:
    url = _filled(endpoint, sim)
    option = _by_the_option(url)
    assert _by_discovery(url) == option, url
    if "," not in url:  # a ClientConfig is one server's
        assert _by_the_client(url) == option, url


def test_the_models_are_asked_of_the_same_root(sim: RunningSimulator) -> None:
    """Discovery's and the jobs' (`served_model`: the model a job asks when given none) look-ups."""
    from connector.flink import served_model

    for endpoint in ("HTTP://{h}/v1/", "http://{h},http://127.0.0.2:{p}"):
        assert served_models(_filled(endpoint, sim)) == served_models(sim.url)
        assert served_model(_filled(endpoint, sim)) == served_models(sim.url)[0]
