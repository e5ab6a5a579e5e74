"""Schema discovery: which columns a table over an endpoint gets, from the most trusted source available.

1. `/health/json-schema` (the simulator and gateways serve it; vLLM does not): the body's JSON Schema, with
   the unit of `created` and the content schema as `x-` hints.
2. What the server says about itself: vLLM answers `/version` and `/v1/models` (`owned_by: "vllm"`); its
   body shape is then the built-in one (the `openai` profile, checked on vLLM 0.32) plus the profile. With
   `probe=True` a `max_tokens: 1` request confirms it, and top-level fields the shape lacks become columns.
3. The profile alone, for another OpenAI-compatible server.

`SchemaCache` keeps the result for a TTL and notices a changed schema (a new field) without a restart.

    >>> from connector.server.discovery import discover_schema
    >>> found = discover_schema("http://127.0.0.1:8000", profile="coder")  # doctest: +SKIP
    >>> found.source, found.ddl()  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import jsonschema
import pyarrow as pa

from connector import profiles as profiles_module
from connector.errors import (
    ClientError,
    ConnectError,
    DsparkError,
    ProfileError,
    SchemaDiscoveryError,
    TLSError,
)
from connector.options.endpoint import CLI_KEYS, checked
from connector.profiles import Profile, builtin_profiles, load_profile, profile_for_model
from connector.server.request import ClientConfig, open_transport
from connector.types.columns import output_schema
from connector.types.flink_types import ddl_columns
from connector.types.json_types import PRIMITIVE_TYPES, declared_types, json_type

__all__ = ["DiscoveredSchema", "SchemaCache", "discover_schema", "served_models"]

logger = logging.getLogger("connector.types")
Source = Literal["json-schema", "vllm", "vllm+probe", "profile", "profile+probe"]
_PRIMITIVE = {"string", "integer", "number", "boolean"}


@dataclass(frozen=True)
class DiscoveredSchema:
    """What discovery found. `profile` is the effective profile: the chosen one plus discovered fields."""

    endpoint: str
    source: Source
    detail: str  # one line for people: where the schema came from (the profile is `profile`)
    server: str | None  # "vLLM 0.32.0", or what /health/json-schema says it is
    models: tuple[str, ...]
    max_model_len: int | None
    profile: Profile
    added_fields: tuple[str, ...]  # top-level fields beyond the profile, now columns
    notes: tuple[str, ...] = ()
    body_schema: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def fingerprint(self) -> str:
        """Changes whenever the columns or the content schema change."""
        data = json.dumps(
            [self.profile.body_schema, self.profile.content_schema, self.profile.created_unit],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(data.encode()).hexdigest()[:16]

    def arrow_schema(self) -> pa.Schema:
        return output_schema(self.profile)

    def ddl(self) -> str:
        """The columns as a 'dspark-vllm' table declares them: `line` is no body column (the table gives it as
        the metadata key 'source.line')."""
        schema = self.arrow_schema()
        return ddl_columns(schema.remove(schema.get_field_index("line")))

    def json_schema(self) -> dict[str, Any]:
        return self.profile.response_json_schema()


class _Http:
    """GETs and POSTs over the client's transport that turn every way of failing into one clear
    SchemaDiscoveryError."""

    def __init__(self, config: ClientConfig) -> None:
        self.endpoint = config.root_url
        self.timeout_s = config.timeout_s
        self.transport = open_transport(config, connections=1)

    async def request(self, method: str, path: str, json_body: Any = None) -> tuple[int, bytes]:
        url = self.endpoint + path
        content = None if json_body is None else json.dumps(json_body).encode()
        headers = None if content is None else {"content-type": "application/json"}
        try:
            async with (
                asyncio.timeout(self.timeout_s),
                self.transport.request(method, path, content=content, headers=headers) as response,
            ):
                status, body = response.status, await response.read()
        except TimeoutError:
            raise SchemaDiscoveryError(f"{url} did not answer within {self.timeout_s:g} s") from None
        except TLSError as exc:
            raise SchemaDiscoveryError(
                f"TLS verification failed for {self.endpoint}: {exc.message}. Give the CA that signed the server's "
                "certificate (--ca-bundle), or pass --insecure only for a server you trust"
            ) from None
        except ConnectError as exc:
            raise SchemaDiscoveryError(
                f"cannot connect to {self.endpoint}: {exc.message}. Is the server running, and is the URL right?"
            ) from None
        except ClientError as exc:
            raise SchemaDiscoveryError(f"{method} {url} failed: {exc}") from None
        if status in (401, 403):
            raise SchemaDiscoveryError(
                f"{url} refused the request (HTTP {status}): give the API key (--api-key, or --api-key-env with "
                "the name of the variable that holds it)"
            )
        return status, body

    async def get_json(self, path: str, optional: bool = False) -> Any:
        status, body = await self.request("GET", path)
        if optional and status in (404, 405):
            return None
        if status != 200:
            raise SchemaDiscoveryError(f"{self.endpoint}{path} answered HTTP {status}")
        try:
            return json.loads(body)
        except ValueError:
            raise SchemaDiscoveryError(f"{self.endpoint}{path} did not answer JSON") from None

    async def close(self) -> None:
        await self.transport.aclose()


T = TypeVar("T")


def _run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end on a new event loop, in this thread, or in a helper thread when this thread
    already runs a loop (a notebook, an async caller of a blocking API)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(1, thread_name_prefix="dspark-vllm-blocking") as pool:
        return pool.submit(asyncio.run, coro).result()


def _first(endpoint: str) -> str:
    """The base URL discovery asks: the first of the endpoint's (its replicas serve the same model), read and
    checked as the 'endpoint' option's are; a mistake in the call (exit 2 on the command line) is found before
    anything is asked of the server."""
    return checked(endpoint, "the endpoint", CLI_KEYS)[0]


def _profile(value: Profile | str | None) -> Profile | None:
    if value is None or isinstance(value, Profile):
        return value
    return load_profile(value)


def _extend(
    base: Profile, served: Mapping[str, Any], label: str, content: Any, created: str | None
) -> tuple[Profile, tuple[str, ...], list[str]]:
    """`base` plus the top-level primitive fields of `served` that it lacks (each a new column)."""
    notes: list[str] = []
    known = base.body_schema.get("properties", {})
    columns = {c["name"] for c in base.columns} | {p.name for p in base.content_properties}
    fields: dict[str, Any] = {}
    for name, schema in (served.get("properties") or {}).items():
        if name in known or not isinstance(schema, Mapping):
            continue
        kinds = declared_types(schema)
        if len(kinds) != 1 or kinds[0] not in _PRIMITIVE:
            notes.append(f"field '{name}' ({schema.get('type')}) is not a primitive: not a column")
        elif name in columns or name in ("line", "content_error"):
            notes.append(f"field '{name}' clashes with a column of the same name: not a column")
        else:
            fields[name] = {
                "type": [kinds[0], "null"],
                **{k: v for k, v in schema.items() if k == "description"},
            }
    data: dict[str, Any] = {"name": base.name}
    if fields:
        data["fields"] = fields
    if content is not None and content != base.content_schema:
        data["content"] = content
    if created is not None and created != base.created_unit:
        data["created"] = created
    if len(data) == 1:
        return base, (), notes
    try:
        # The profile loader validates what was discovered exactly as it validates a profile file.
        profile = profiles_module._build(Path(label), data, base)
    except ProfileError as exc:
        raise SchemaDiscoveryError(f"the schema served by {label} cannot be used: {exc}") from None
    return profile, tuple(fields), notes


def discover_schema(
    endpoint: str,
    profile: Profile | str | None = None,
    *,
    probe: bool = False,
    timeout_s: float = 10.0,
    **client_options: Any,
) -> DiscoveredSchema:
    """Discover the response schema of `endpoint` (the server root, a trailing /v1 accepted; of several separated
    by commas, replicas of one model, the first).

    `profile`: the model profile to apply (default: the one the server names, else the one whose model
    patterns match the served model). `client_options` are `ClientConfig`'s (api_key, verify, ca_bundle,
    client_cert, client_key, ...). Raises SchemaDiscoveryError with a one-line message saying what to do
    (OptionsError for an endpoint that is no http(s) URL).
    """
    config = ClientConfig(_first(endpoint), timeout_s=timeout_s, **client_options)
    return _run_blocking(_discover_with(config, _profile(profile), probe))


def served_models(endpoint: str, *, timeout_s: float = 10.0, **client_options: Any) -> tuple[str, ...]:
    """The ids of the models `endpoint` serves (its first base URL's /v1/models), in the server's order. Raises
    SchemaDiscoveryError with a one-line message saying what to do (OptionsError for an endpoint that is no
    http(s) URL), as `discover_schema`."""
    return _run_blocking(_served_models(ClientConfig(_first(endpoint), timeout_s=timeout_s, **client_options)))


async def _served_models(config: ClientConfig) -> tuple[str, ...]:
    http = _Http(config)
    try:
        return _model_ids(await http.get_json("/v1/models"), config.root_url)[0]
    finally:
        await http.close()


def _model_ids(models_doc: Any, root: str) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """The model ids of a /v1/models answer, and its entries."""
    data = models_doc.get("data") if isinstance(models_doc, dict) else None
    if not isinstance(data, list):
        raise SchemaDiscoveryError(f"{root}/v1/models is not an OpenAI model list")
    entries = [m for m in data if isinstance(m, dict)]
    return tuple(str(m.get("id")) for m in entries), entries


async def _discover_with(config: ClientConfig, chosen: Profile | None, probe: bool) -> DiscoveredSchema:
    http = _Http(config)
    try:
        return await _discover(http, config.root_url, chosen, probe)
    finally:
        await http.close()


async def _discover(http: _Http, root: str, chosen: Profile | None, probe: bool) -> DiscoveredSchema:
    served = await http.get_json("/health/json-schema", optional=True)
    if served is not None:
        if not isinstance(served, dict) or not isinstance(served.get("properties"), dict):
            raise SchemaDiscoveryError(f"{root}/health/json-schema is not a JSON Schema of an object")
        try:
            jsonschema.Draft202012Validator.check_schema(served)
        except jsonschema.SchemaError as exc:
            raise SchemaDiscoveryError(f"{root}/health/json-schema is not a valid JSON Schema: {exc.message}") from None
        notes: list[str] = []
        named = served.get("x-profile")
        if chosen is None:
            chosen = load_profile(named) if named in builtin_profiles() else load_profile("openai")
        elif named and named != chosen.name:
            notes.append(f"the server describes profile '{named}'; using '{chosen.name}' as asked")
        # A profile asked for by name keeps its own content schema; otherwise the server's wins.
        content = served.get("x-content-schema") if chosen.name == named or chosen.content_schema is None else None
        profile, added, more = _extend(chosen, served, root, content, served.get("x-created-unit"))
        server = served.get("x-server")
        model = served.get("x-model")
        found = DiscoveredSchema(
            endpoint=root,
            source="json-schema",
            detail=f"{root}/health/json-schema" + (f" ({server})" if server else ""),
            server=server,
            models=(model,) if model else (),
            max_model_len=None,
            profile=profile,
            added_fields=added,
            notes=tuple(notes + more),
            body_schema=served,
        )
        return await _probe(http, found) if probe else found

    version = await http.get_json("/version", optional=True)
    models, data = _model_ids(await http.get_json("/v1/models"), root)
    owners = {m.get("owned_by") for m in data}
    lens = [m.get("max_model_len") for m in data if isinstance(m.get("max_model_len"), int)]
    if chosen is None:
        chosen = profile_for_model(models[0]) if models else load_profile("openai")
    notes = []
    if owners == {"vllm"}:
        ver = version.get("version") if isinstance(version, dict) else None
        server = f"vLLM {ver}" if ver else "vLLM"
        source: Source = "vllm"
        detail = f"{server} at {root} (/version, /v1/models), built-in vLLM body shape"
    else:
        server = None
        source = "profile"
        owned = sorted(map(str, owners))
        detail = f"the profile's body shape ({root} is an OpenAI-compatible server, owned_by={owned})"
        notes.append("not a vLLM server: the body shape is the profile's, unconfirmed (use --probe to check it)")
    found = DiscoveredSchema(
        endpoint=root,
        source=source,
        detail=detail,
        server=server,
        models=models,
        max_model_len=lens[0] if lens else None,
        profile=chosen,
        added_fields=(),
        notes=tuple(notes),
        body_schema=chosen.body_schema,
    )
    return await _probe(http, found) if probe else found


async def _probe(http: _Http, found: DiscoveredSchema) -> DiscoveredSchema:
    """One `max_tokens: 1` request: its body must fit the schema; new top-level fields become columns."""
    request: dict[str, Any] = {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    if found.models:
        request["model"] = found.models[0]
    status, raw = await http.request("POST", "/v1/chat/completions", request)
    if status != 200:
        raise SchemaDiscoveryError(
            f"the probe request to {found.endpoint}/v1/chat/completions failed: HTTP {status} "
            f"{raw[:200].decode('utf-8', 'replace')}"
        )
    try:
        body = json.loads(raw)
    except ValueError:
        raise SchemaDiscoveryError(f"the probe response of {found.endpoint} is not JSON") from None
    if not isinstance(body, dict):
        raise SchemaDiscoveryError(f"the probe response of {found.endpoint} is not a JSON object")
    notes = list(found.notes)
    schema = dict(found.profile.body_schema)
    for error in sorted(jsonschema.Draft202012Validator(schema).iter_errors(body), key=lambda e: list(e.path))[:5]:
        where = ".".join(map(str, error.absolute_path)) or "(body)"
        notes.append(f"probe: {where}: {error.message}")
    seen = {
        name: {"type": kind}
        for name, value in body.items()
        if name not in schema.get("properties", {}) and (kind := json_type(value)) in PRIMITIVE_TYPES
    }
    nested = sorted(n for n, v in body.items() if n not in schema.get("properties", {}) and isinstance(v, dict | list))
    if nested:  # (null fields say nothing about their type: they are left out silently)
        notes.append(f"probe: fields {nested} are nested: not columns")
    profile, added, more = _extend(found.profile, {"properties": seen}, found.endpoint, None, None)
    return DiscoveredSchema(
        endpoint=found.endpoint,
        source=f"{found.source}+probe" if "+" not in found.source else found.source,  # type: ignore[arg-type]
        detail=found.detail + ", confirmed by a probe request",
        server=found.server,
        models=found.models,
        max_model_len=found.max_model_len,
        profile=profile,
        added_fields=found.added_fields + added,
        notes=tuple(notes + more),
        body_schema=found.body_schema,
    )


@dataclass
class _Entry:
    schema: DiscoveredSchema
    fetched: float


class SchemaCache:
    """Discovered schemas per endpoint, refetched after `ttl_s`; a changed one replaces the old one (logged).

    If a refetch fails, the last good schema is kept (and tried again after `retry_s`). `on_change(old, new)`
    is called when the fingerprint changed. Thread-safe.
    """

    def __init__(
        self,
        ttl_s: float = 300.0,
        *,
        fetch: Callable[[str], DiscoveredSchema] | None = None,
        on_change: Callable[[DiscoveredSchema, DiscoveredSchema], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_s: float | None = None,
        **discover_options: Any,
    ) -> None:
        self.ttl_s = ttl_s
        self.retry_s = retry_s if retry_s is not None else min(ttl_s, 30.0)
        self._fetch = fetch or (lambda endpoint: discover_schema(endpoint, **discover_options))
        self._on_change = on_change
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()
        self.changes = 0
        self.fetches = 0

    def get(self, endpoint: str) -> DiscoveredSchema:
        with self._lock:
            now = self._clock()
            entry = self._entries.get(endpoint)
            if entry is not None and now < entry.fetched:
                return entry.schema
            self.fetches += 1
            try:
                new = self._fetch(endpoint)
            except DsparkError as exc:
                if entry is None:
                    raise
                logger.warning("schema of %s: refetch failed, keeping the last one: %s", endpoint, exc)
                entry.fetched = now + self.retry_s
                return entry.schema
            old = entry.schema if entry is not None else None
            self._entries[endpoint] = _Entry(new, now + self.ttl_s)
        if old is not None and old.fingerprint != new.fingerprint:
            self.changes += 1
            added = sorted(set(new.added_fields) - set(old.added_fields))
            logger.info(
                "schema of %s changed (%s -> %s)%s",
                endpoint,
                old.fingerprint,
                new.fingerprint,
                f": new fields {added}" if added else "",
            )
            if self._on_change is not None:
                self._on_change(old, new)
        return new

    def invalidate(self, endpoint: str | None = None) -> None:
        with self._lock:
            if endpoint is None:
                self._entries.clear()
            else:
                self._entries.pop(endpoint, None)
