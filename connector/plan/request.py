"""What a plan's request step needs from the client machine at planning: the response store's URI checked
('request.store') and the API key read ('api-key', 'api-key.env', 'api-key.file')."""

from __future__ import annotations

import difflib
import os
import urllib.parse

from connector.errors import OptionsError
from connector.options import (
    API_KEY,
    API_KEY_ENV,
    API_KEY_FILE,
    REQUEST_CACHE,
    REQUEST_STORE,
    Options,
)
from connector.plan.records import (
    Store,
)

__all__ = ["api_key_of", "store_of"]


# Schemes of Flink's file systems and Kafka: a scheme close to one of them (and none itself) is a typo, which
# the store would otherwise meet only on a TaskManager (the job then runs without a store). Another scheme is a
# file system plugin's, which only the TaskManagers can tell.
_STORE_SCHEMES = ("kafka", "file", "s3", "s3a", "s3p", "hdfs", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "viewfs")


def store_of(options: Options) -> Store | None:
    """The request step's response store ('request.store', 'request.cache'), or None; a URI that names no store
    (a typo in its scheme, a Kafka topic not written kafka://host:port[,host:port]/topic) refused."""
    uri = options.get(REQUEST_STORE)
    if uri is None:
        return None
    scheme = urllib.parse.urlsplit(str(uri)).scheme.lower() if "://" in str(uri) else ""
    if scheme and scheme not in _STORE_SCHEMES:
        close = difflib.get_close_matches(scheme, _STORE_SCHEMES, n=1, cutoff=0.75)
        if close:
            raise OptionsError(
                f"Option 'request.store' = {str(uri)!r} starts with '{scheme}://': did you mean '{close[0]}://'? "
                "(a folder of Flink's file systems, or kafka://host:port[,host:port]/topic)"
            )
    if scheme == "kafka":
        rest = str(uri)[len("kafka://") :].split("?", 1)[0]
        host, _, topic = rest.partition("/")
        if not host or not topic or "/" in topic:
            raise OptionsError(
                f"Option 'request.store' = {str(uri).split('?', 1)[0]!r} is not kafka://host:port[,host:port]/topic "
                "(Kafka client settings may follow after '?')."
            )
    ttl = options.get(REQUEST_CACHE)
    return Store(uri=str(uri), cache_ttl_ms=0 if ttl is None else max(1, round(ttl * 1000)))


# An API key file is a secret of a few hundred bytes: read no more than this (a wrong path such as a device or a
# large file must not fill the client's memory).
_API_KEY_FILE_LIMIT = 64 * 1024


def api_key_of(options: Options) -> str | None:
    # What a header can carry is the request step's rule (io.dspark.vllm.request.RequestSpec.of refuses a key with
    # a line break when the faces read this plan, as the query is planned).
    return _read_api_key(options)[0]


def _read_api_key(options: Options) -> tuple[str | None, str]:
    path = options.get(API_KEY_FILE)
    if path is not None:
        where = f"'api-key.file' = '{path}'"
        try:
            with open(path, "rb") as file:
                data = file.read(_API_KEY_FILE_LIMIT + 1)
        except OSError as exc:
            raise OptionsError(
                f"Option 'api-key.file' = '{path}' cannot be read where the table is planned: {exc.strerror}."
            ) from None
        if len(data) > _API_KEY_FILE_LIMIT:
            raise OptionsError(
                f"Option 'api-key.file' = '{path}' is larger than an API key ({_API_KEY_FILE_LIMIT} bytes)."
            )
        try:
            key = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise OptionsError(f"Option 'api-key.file' = '{path}' is not text (UTF-8).") from None
        if not key:
            raise OptionsError(f"Option 'api-key.file' = '{path}' is empty.")
        return key, where
    name = options.get(API_KEY_ENV)
    if name is None:
        return options.get(API_KEY), "'api-key'"
    value = os.environ.get(name)
    if not value:
        raise OptionsError(
            f"Option 'api-key.env' names the environment variable '{name}', which is not set where the table is "
            "planned (the SQL Client, the Gateway, the job's main): set it there, or give 'api-key'."
        )
    return value, f"the environment variable '{name}' ('api-key.env')"
