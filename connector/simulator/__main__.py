"""python -m connector.simulator [options]: the same as `dspark-vllm simulate`."""

from __future__ import annotations

import sys

from connector.simulator.cli import main

sys.exit(main())
