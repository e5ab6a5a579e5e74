"""The request body parameters moved below the client and the options: they are `connector.params`.

This name stays only for `connector.flink.planner`'s import until that module imports `connector.params`
(it is being edited elsewhere); nothing else uses it. Remove it then.
"""

from __future__ import annotations

from connector.params import REQUEST_PARAMS, RequestParam, body_defaults, check_params

__all__ = ["REQUEST_PARAMS", "RequestParam", "body_defaults", "check_params"]
