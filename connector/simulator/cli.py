"""`dspark-vllm simulate`: run the vLLM-compatible simulator (see `connector.simulator.server`)."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import socket
import sys

from connector.errors import DsparkError, OptionsError
from connector.simulator.server import FAULT_KINDS, LATENCY_DISTS, Simulator, SimulatorConfig, parse_fault

__all__ = ["add_arguments", "config_from_args", "config_to_args", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one, printed at start)")
    parser.add_argument(
        "--profile",
        action="append",
        dest="profiles",
        metavar="NAME|FILE",
        help="profile of a served model; repeat to serve several models (default openai)",
    )
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="served model name, one per --profile (default: a real model of that kind)",
    )
    parser.add_argument("--seed", type=int, default=0, help="same seed and request: same body (default 0)")
    parser.add_argument(
        "--latency-ms", type=float, default=0.0, help="added to every completion (lognormal: the median; default 0)"
    )
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="uniform +- around --latency-ms (default 0)")
    parser.add_argument(
        "--latency-dist",
        choices=LATENCY_DISTS,
        default="fixed",
        help="fixed (the default): --latency-ms (+- --jitter-ms); lognormal: median --latency-ms, 99th percentile "
        "--latency-p99-ms",
    )
    parser.add_argument("--latency-p99-ms", type=float, default=None, help="99th percentile of the lognormal latency")
    parser.add_argument(
        "--ms-per-token",
        type=float,
        default=0.0,
        help="added per completion token generated (long answers last; default 0)",
    )
    parser.add_argument(
        "--capacity",
        type=int,
        default=None,
        metavar="N",
        help="completions served at once; more are answered 429 with Retry-After (per worker; default: no limit)",
    )
    parser.add_argument("--itl-ms", type=float, default=0.0, help="delay between stream chunks (default 0)")
    parser.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=0,
        metavar="N",
        help="a prefix cache of N tokens, as vLLM's (its counters on /metrics; default 0: none)",
    )
    parser.add_argument("--block-size", type=int, default=16, help="tokens of a prefix cache block (default 16)")
    parser.add_argument(
        "--prefill-ms-per-token",
        type=float,
        default=0.0,
        help="added per prompt token not found in the prefix cache (a cached head answers sooner)",
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help=f"inject a fault into RATE of the completions; KIND: {', '.join(FAULT_KINDS)}. The answer faults: "
        "refusal (chat choices with message.refusal set and content null, finish_reason 'stop'), ignore-schema "
        "(JSON that breaks the request's schema: a required field missing, a wrong type, an extra field or a "
        "string too long, drawn from the seed)",
    )
    parser.add_argument(
        "--retry-after", type=float, default=1.0, metavar="S", help="Retry-After of 429/503 (default 1)"
    )
    parser.add_argument("--slow-ms", type=float, default=2000.0, help="extra delay of the 'slow' fault (default 2000)")
    parser.add_argument("--hang-s", type=float, default=3600.0, help="how long the 'hang' fault waits (default 3600)")
    parser.add_argument("--big-mb", type=float, default=4.0, help="content size of the 'big' fault (default 4)")
    parser.add_argument("--flood-mb", type=float, default=2048.0, help="body size of the 'flood' fault (default 2048)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("DSPARK_SIM_API_KEY"),
        help="require 'Authorization: Bearer KEY' on /v1/* (default $DSPARK_SIM_API_KEY)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=8192,
        metavar="TOKENS",
        help="the served model's context length: a request whose max_tokens is larger is answered 400, as vLLM "
        "does (default 8192)",
    )
    parser.add_argument(
        "--vllm-version", default="0.32.0", help="what /version says (< 0.10: reasoning_content; default 0.32.0)"
    )
    parser.add_argument("--no-metrics", action="store_true", help="no per-request `metrics` in bodies")
    parser.add_argument("--no-json-schema", action="store_true", help="no /health/json-schema, like a plain vLLM")
    parser.add_argument("--created", type=int, default=None, help="fixed `created` (Unix s) instead of the clock")
    parser.add_argument(
        "--workers", type=int, default=1, help="server processes sharing the port (SO_REUSEPORT; default 1)"
    )


def config_from_args(args: argparse.Namespace) -> SimulatorConfig:
    return SimulatorConfig(
        profiles=tuple(args.profiles or ("openai",)),
        models=tuple(args.models or ()),
        seed=args.seed,
        latency_ms=args.latency_ms,
        jitter_ms=args.jitter_ms,
        latency_dist=args.latency_dist,
        latency_p99_ms=args.latency_p99_ms,
        ms_per_token=args.ms_per_token,
        capacity=args.capacity,
        itl_ms=args.itl_ms,
        prefix_cache_tokens=args.prefix_cache_tokens,
        block_size=args.block_size,
        prefill_ms_per_token=args.prefill_ms_per_token,
        faults=dict(parse_fault(spec) for spec in args.fault),
        retry_after_s=args.retry_after,
        slow_ms=args.slow_ms,
        hang_s=args.hang_s,
        big_bytes=int(args.big_mb * 1024 * 1024),
        flood_bytes=int(args.flood_mb * 1024 * 1024),
        api_key=args.api_key,
        max_model_len=args.max_model_len,
        metrics=not args.no_metrics,
        version=args.vllm_version,
        json_schema=not args.no_json_schema,
        created=args.created,
    )


def config_to_args(config: SimulatorConfig) -> list[str]:
    """The command-line arguments that make `config` (for a simulator in a subprocess)."""
    default = SimulatorConfig()
    args: list[str] = []
    for p in config.profiles:
        args += ["--profile", p]
    for m in config.models:
        args += ["--model", m]
    flags = {
        "seed": "--seed",
        "latency_ms": "--latency-ms",
        "jitter_ms": "--jitter-ms",
        "latency_dist": "--latency-dist",
        "latency_p99_ms": "--latency-p99-ms",
        "ms_per_token": "--ms-per-token",
        "capacity": "--capacity",
        "itl_ms": "--itl-ms",
        "prefix_cache_tokens": "--prefix-cache-tokens",
        "block_size": "--block-size",
        "prefill_ms_per_token": "--prefill-ms-per-token",
        "retry_after_s": "--retry-after",
        "slow_ms": "--slow-ms",
        "hang_s": "--hang-s",
        "max_model_len": "--max-model-len",
        "version": "--vllm-version",
        "created": "--created",
    }
    for name, flag in flags.items():
        if getattr(config, name) != getattr(default, name):
            args += [flag, str(getattr(config, name))]
    if config.big_bytes != default.big_bytes:
        args += ["--big-mb", repr(config.big_bytes / (1024 * 1024))]
    if config.flood_bytes != default.flood_bytes:
        args += ["--flood-mb", repr(config.flood_bytes / (1024 * 1024))]
    for kind, rate in config.faults.items():
        args += ["--fault", f"{kind}={rate!r}"]
    if not config.metrics:
        args.append("--no-metrics")
    if not config.json_schema:
        args.append("--no-json-schema")
    if config.extra_fields:
        raise DsparkError("extra_fields can only be set on a simulator in this process (mode='thread')")
    # config.api_key is not an argument: it travels in $DSPARK_SIM_API_KEY (`ps` shows command lines).
    return args


async def _serve(config: SimulatorConfig, host: str, port: int, reuse_port: bool, announce: bool) -> int:
    """Serve until SIGINT, SIGTERM or SIGHUP, then close; returns the signal that stopped it."""
    sim = Simulator(config)
    # The signals are taken before the server says it listens: a signal sent on that line stops it cleanly.
    stopped: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    loop = asyncio.get_running_loop()

    def stop(signum: int) -> None:
        if not stopped.done():
            stopped.set_result(signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop, sig)
    bound_host, bound_port = await sim.start(host, port, reuse_port=reuse_port)
    if announce:
        faults = ", ".join(f"{k}={v:g}" for k, v in config.faults.items()) or "none"
        extra = f"; capacity: {config.capacity}" if config.capacity is not None else ""
        if config.latency_dist == "lognormal":
            extra += f"; latency: lognormal, median {config.latency_ms:g} ms, p99 {config.latency_p99_ms:g} ms"
        print(
            f"dspark-vllm simulator listening on http://{bound_host}:{bound_port} "
            f"(models: {', '.join(f'{m} [{p.name}]' for m, p in sim.profiles.items())}; faults: {faults}{extra})",
            flush=True,
        )
    signum = await stopped
    await sim.close()
    return signum


def _worker(config: SimulatorConfig, host: str, port: int) -> None:
    asyncio.run(_serve(config, host, port, reuse_port=True, announce=False))


def run(args: argparse.Namespace) -> int:
    """Serve until a signal stops it, then end as `dspark-vllm` ends on that signal (`connector.cli.main` says
    so and exits 130 on SIGINT, 143 on SIGTERM, 129 on SIGHUP); a bad profile or fault is a usage error."""
    from connector.cli import Terminated

    try:
        config = config_from_args(args)
        Simulator(config)  # profiles load here: a bad one fails before any port is bound
    except DsparkError as exc:
        raise OptionsError(str(exc)) from None
    if args.workers <= 1:
        signum = asyncio.run(_serve(config, args.host, args.port, reuse_port=False, announce=True))
    else:
        port = args.port
        if port == 0:
            with socket.socket() as s:
                s.bind((args.host, 0))
                port = s.getsockname()[1]
        ctx = multiprocessing.get_context("fork")
        workers = [
            ctx.Process(target=_worker, args=(config, args.host, port), daemon=True) for _ in range(args.workers - 1)
        ]
        for w in workers:
            w.start()
        try:
            signum = asyncio.run(_serve(config, args.host, port, reuse_port=True, announce=True))
        finally:
            for w in workers:
                if w.pid is not None:
                    os.kill(w.pid, signal.SIGTERM)
                w.join(5)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    """`python -m connector.simulator ARGS`: `dspark-vllm simulate ARGS`, exit status and messages included."""
    from connector.cli import main as cli_main

    return cli_main(["simulate", *(sys.argv[1:] if argv is None else argv)])
