"""The Python reference path: what the native core and libcudf are held to, with the tests.

`exact` (a body, or a content, at a time with Python's `json` under `connector.strict`'s rules), `content`
(the second parse: contents into their properties), `extract` (the `x-extract` patterns over free text) and
`quoting` (a user's text as a reason quotes it), `sse` (a server-sent event stream -> the body the same
request gives without streaming: what the simulator's streams are checked against). No module of the
product imports these (tests/test_layers.py holds it to that): at run time every body is decided by the native core, on the gpu backend what libcudf
leaves too.
"""
