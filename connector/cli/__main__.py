"""`python -m connector.cli ...`: the `dspark-vllm` command from a checkout or a virtual environment."""

from __future__ import annotations

import sys

from connector.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
