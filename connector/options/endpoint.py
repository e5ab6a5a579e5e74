"""An endpoint's base URLs, read once: the one owner of what an endpoint may be and which server it names.

An endpoint is one base URL or several separated by commas (replicas). Every reader of one calls this module: the
'endpoint' option's rule (`connector.options.rules`), the request step's URLs the planner writes
(`connector.plan.contract`), discovery and its client (`connector.server.discovery`, `.request`: `dspark-vllm
columns`, the jobs' model look-up). So a URL that one of them refuses the others refuse too, with the same
reason, and one that they take names the same server root for all of them.

    >>> base_urls("HTTP://a:8000/v1/, https://b")
    ['http://a:8000/v1/', 'https://b']
    >>> root("http://a:8000/v1/")
    'http://a:8000'
    >>> shown_url("http://user:key@a:8000?token=key")
    'http://******@a:8000?******'
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from connector.errors import OptionsError

__all__ = [
    "CLI_KEYS",
    "EXAMPLE",
    "OPTION_KEYS",
    "base_url",
    "base_urls",
    "checked",
    "checked_url",
    "problem",
    "root",
    "shown_url",
]

EXAMPLE = "http://127.0.0.1:8000"
# How a key is given instead of in the URL: to a table or model, and on the command line.
OPTION_KEYS = "'api-key', 'api-key.env' or 'api-key.file'"
CLI_KEYS = "--api-key or --api-key-env"

# A host name the jar's java.net.URI reads as a host (it takes one with '_' for a registry-based authority).
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")

# What java.net.URI refuses in a path (RFC 2396: neither unreserved, reserved, escaped nor a non-ASCII character).
_PATH_REFUSED = re.compile(r'[{}|\\^\[\]"<>`]|%(?![0-9A-Fa-f]{2})')


def shown_url(url: str) -> str:
    """`url` as a message may show it: a user name or password (before '@'), a query and a fragment (which may hold
    a key: '?api_key=...') masked. Every message that repeats an endpoint the user gave goes through it."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:  # up to the last '@': a password may hold '/', '?', '#' or ',' (which parts 'endpoint')
        rest = "******@" + rest.rpartition("@")[2]
    shown = f"{scheme}{sep}{rest}"
    for mark in "?#":
        if mark in shown:
            shown = shown.partition(mark)[0] + mark + "******"
    return shown


def base_url(url: str) -> str:
    """One base URL as it is read: without the spaces around it, its scheme in lower case (a scheme is
    case-insensitive: 'HTTP://h' is 'http://h')."""
    return re.sub(r"^[A-Za-z]+(?=://)", lambda m: m.group(0).lower(), url.strip())


def base_urls(endpoint: str) -> list[str]:
    """The base URLs of an endpoint: one, or several separated by commas (replicas), each as `base_url` reads it."""
    return [base_url(part) for part in endpoint.split(",")]


def root(url: str) -> str:
    """The server root of a (checked) base URL, which the request paths ('/v1/chat/completions', '/health',
    '/v1/models') are added to: without a trailing '/' or '/v1' (both spellings are accepted)."""
    return base_url(url).rstrip("/").removesuffix("/v1")


def _server_of(url: str) -> tuple[str, str, int, str]:
    """The server a (checked) base URL names: its scheme, host, port (the scheme's own where none is written) and
    root path."""
    parts = urlsplit(root(url))
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port, parts.path.rstrip("/")


def problem(url: str, keys: str = OPTION_KEYS) -> str | None:
    """Why the connector could not ask the server at the base URL `url` (as `base_url` reads it), or None: what
    the jar's request step (java.net.URI, then a connection) and discovery's transport both take. `keys`: how a
    key is given where the URL came from."""
    if not re.match(r"^https?://[^/\s]+", url) or any(c.isspace() for c in url):
        return "it is not an http(s) URL"
    if "@" in url.partition("://")[2]:  # (a password may hold '/', which ends the authority before its '@')
        return f"it holds a user name or password: give the key with {keys}"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "its host or port cannot be read (a port is a number from 1 to 65535; an IPv6 address is in [])"
    if "?" in url or "#" in url:
        return (
            f"the request paths are added to it, so it takes no query ('?') or fragment ('#') (give a key with {keys})"
        )
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"its host '{host}' is not an IPv6 address"
    elif not _HOST_NAME.match(host):
        return f"its host '{host}' is not a host name or an IP address (letters, digits, '-' and '.'; no '_')"
    if port == 0:
        return "its port is not a number from 1 to 65535"
    request_path = re.search(r"(/v1)?/(chat/)?completions/*$", parts.path)
    if request_path:
        base = url[: url.rindex(request_path.group(0))] or url
        return (
            f"it ends in the request path '{request_path.group(0).rstrip('/')}', which the request step adds itself: "
            f"give the server's base URL, such as '{shown_url(base)}'"
        )
    if _PATH_REFUSED.search(parts.path):
        return (
            "its path holds a character java.net.URI refuses as it is ('{', '}', '|', '\\', '^', '[', ']', '\"', "
            "'<', '>', '`', or a '%' not before two hex digits): percent-encode it"
        )
    return None


def _refused(subject: str, several: str, shown: str, why: str) -> OptionsError:
    return OptionsError(f"{subject} must be an http(s) URL{several} such as '{EXAMPLE}', got '{shown}': {why}.")


def checked_url(url: str, subject: str, keys: str = OPTION_KEYS) -> str:
    """One base URL (`base_url`; a comma in it is no separator), one the connector can ask (`problem`); else an
    OptionsError as `checked`'s."""
    read = base_url(url)
    why = problem(read, keys)
    if why is not None:
        raise _refused(subject, "", shown_url(url), why)
    return read


def checked(endpoint: str, subject: str, keys: str = OPTION_KEYS) -> list[str]:
    """The base URLs of `endpoint` (`base_urls`), each one the connector can ask (`problem`), each server named
    once; else an OptionsError whose message starts with `subject` (what the endpoint was given as: "Option
    'endpoint'") and shows no user name, password, query or fragment."""
    urls = base_urls(endpoint)
    for url in urls:
        why = problem(url, keys)
        if why is not None:
            several = " (one of several separated by commas)" if len(urls) > 1 else ""
            # a password with a comma in it spans two parts: the whole endpoint, masked, shows none of it
            raise _refused(subject, several, shown_url(endpoint if "@" in endpoint else url), why)
    servers = [_server_of(u) for u in urls]
    twice = sorted({u for u, s in zip(urls, servers, strict=True) if servers.count(s) > 1})
    if twice:
        raise OptionsError(f"{subject} names the replica '{shown_url(twice[0])}' twice; name each once.")
    return urls
