"""What a plan's request step needs from the client machine at planning: the response store's URI checked
('request.store'), the API key read ('api-key', 'api-key.env', 'api-key.file'), and the request ids of a
'prompts.path' file (the same ids the JVM makes, for tests and tools)."""

from __future__ import annotations

import difflib
import hashlib
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

__all__ = ["api_key_of", "request_id_of", "request_ids_of", "store_of"]


def request_id_of(file: str | os.PathLike[str], line_number: int, line: str) -> str:
    """The request id of line `line_number` (from 1) of a 'prompts.path' file: the hex MD5 of
    `<file>\n<line number>\n<line>` (io.dspark.vllm.sql.FileLines.requestId, which makes it in the job), the
    file a local one's absolute path or another's URI. Two identical lines are two ids."""
    name = os.fspath(file)
    if name.startswith("file:") or "://" not in name:  # local: the absolute path, as Flink's Path makes it
        name = os.path.abspath(urllib.parse.urlsplit(name).path if name.startswith("file:") else name)
    return hashlib.md5(f"{name}\n{line_number}\n{line}".encode()).hexdigest()


def request_ids_of(path: str | os.PathLike[str]) -> list[str]:
    """The request ids of every line of a local 'prompts.path' file, in order (`request_id_of`)."""
    with open(path, "rb") as file:
        lines = file.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # a file ending in a newline has no empty last line
    return [
        request_id_of(path, n, line.removesuffix(b"\r").decode("utf-8", "replace"))
        for n, line in enumerate(lines, start=1)
    ]


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


def _header_value(text: str) -> bool:
    """What the request step can send as a header value (io.dspark.vllm.request.Requester.headerValue):
    visible ASCII, space, tab and obs-text; no CR, LF or other control characters."""
    return all(not ((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F or ord(c) > 0xFF) for c in text)


def api_key_of(options: Options) -> str | None:
    key, where = _read_api_key(options)
    if key is not None and not _header_value(key):
        raise OptionsError(
            f"The API key from {where} holds characters an HTTP header cannot carry (a line break, another control "
            "character or a character beyond Latin-1); give the key alone."
        )
    return key


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
