"""`ironic-shard-operator run`: leader election, then kopf; health and metrics endpoints.

Environment:
  WATCH_NAMESPACES  comma-separated namespaces to watch; empty: all (cluster-wide)
  POD_NAMESPACE     where the leader Lease lives (default: "default")
  POD_NAME          this replica's identity in the Lease (default: hostname-pid)
  METRICS_PORT      Prometheus /metrics (default 8080; 0 disables)
  HEALTH_PORT       /healthz, answered by leader and standby alike (default 8081; 0 disables):
                    200 "ok leader" / "ok standby"; 503 with the reason once a pool loop of
                    the leader is stuck for 5 poll intervals (at least 300 s; core/liveness.py),
                    so that the kubelet's liveness probe restarts the replica
  LOG_FORMAT        text (default: "[time] logger [LEVEL] message") or json (one JSON object
                    per line: message, timestamp, severity, exc_info)
  OPERATOR_DEBUG    any non-empty value: the log at DEBUG (kopf's steps and every pod event it
                    handles, the OpenStack libraries' requests; credentials still masked)

Exactly one replica acts: it holds the coordination.k8s.io Lease `ironic-shard-operator` in
POD_NAMESPACE (core/lease.py, client-go's timings) and writes nothing once its renew deadline
has passed; kopf runs standalone (its peering would let two equal-priority replicas both act).
The Lease's timings and what a frozen leader can still do: docs/design.md, "The operator process".
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import kopf
from aiohttp import web

from ironic_shard_operator.adapters.kube import Kube
from ironic_shard_operator.controller import log_redaction
from ironic_shard_operator.controller.leader import LeaderElector
from ironic_shard_operator.core.lease import LEASE_NAME, RETRY

log = logging.getLogger("ironic_shard_operator.controller.runner")


LOG_FORMATS = {"text": kopf.LogFormat.FULL, "json": kopf.LogFormat.JSON}


@dataclass(frozen=True)
class Settings:
    namespaces: tuple[str, ...]
    pod_namespace: str
    identity: str
    metrics_port: int
    health_port: int
    log_format: str = "text"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Settings":
        def port(name: str, default: int) -> int:
            raw = env.get(name, "").strip() or str(default)
            if not raw.isdigit() or int(raw) > 65535:
                raise SystemExit(f"{name}={raw!r}: must be a port number (0 disables)")
            return int(raw)

        log_format = env.get("LOG_FORMAT", "").strip().lower() or "text"
        if log_format not in LOG_FORMATS:
            raise SystemExit(f"LOG_FORMAT={log_format!r}: must be one of {', '.join(LOG_FORMATS)}")
        return cls(
            log_format=log_format,
            namespaces=tuple(n.strip() for n in env.get("WATCH_NAMESPACES", "").split(",") if n.strip()),
            pod_namespace=env.get("POD_NAMESPACE", "").strip() or "default",
            identity=env.get("POD_NAME", "").strip() or f"{socket.gethostname()}-{os.getpid()}",
            metrics_port=port("METRICS_PORT", 8080),
            health_port=port("HEALTH_PORT", 8081),
        )


@dataclass
class Health:
    """What /healthz answers: this replica's role, and why its pool loops are not alive
    (`problems`: the leader's Operator.stuck_loops once it leads)."""

    role: str = "standby"
    problems: Callable[[], list[str]] = lambda: []


async def _serve_health(port: int, health: Health) -> web.AppRunner | None:
    if not port:
        return None

    async def healthz(_: web.Request) -> web.Response:
        problems = health.problems()
        if problems:
            return web.Response(status=503, text=f"unhealthy {health.role}: " + "; ".join(problems) + "\n")
        return web.Response(text=f"ok {health.role}\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    return runner


async def run(settings: Settings) -> int:
    """Standby until elected, then run kopf until stopped or the Lease is lost."""
    from ironic_shard_operator.controller import handlers  # noqa: F401  (registers the handlers)
    from ironic_shard_operator.controller.metrics import OperatorMetrics
    from ironic_shard_operator.controller.runtime import Operator

    state = Health()
    health = await _serve_health(settings.health_port, state)
    metrics = OperatorMetrics()
    metrics_server = metrics.serve(settings.metrics_port) if settings.metrics_port else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # Renewals are bounded by RETRY (keep()); a 429/5xx is retried within that time only.
    election_kube = Kube(timeout=RETRY, retry_budget=RETRY / 2)
    elector = LeaderElector(election_kube, settings.pod_namespace, settings.identity, metrics)
    code = 0
    try:
        acquiring = asyncio.ensure_future(elector.acquire())
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait([acquiring, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not acquiring.done():
            acquiring.cancel()
            return 0
        stopping.cancel()
        state.role = "leader"
        metrics.set_leader(True)
        code = await _lead(settings, elector, metrics, stop, Operator, state)
    finally:
        metrics.set_leader(False)
        if code == 0:
            await elector.release()
        await election_kube.close()
        if health is not None:
            await health.cleanup()
        if metrics_server is not None:
            metrics_server.shutdown()
    return code


async def _lead(settings: Settings, elector: LeaderElector, metrics: Any, stop: asyncio.Event,
                operator_class: Any, health: Health | None = None) -> int:
    """Run kopf while the Lease is held; 0 after a requested stop. Losing the Lease ends
    the process at once (exit code 1). /healthz follows the pool loops from now on."""
    operator = operator_class(Kube(may_write=elector.may_write), metrics=metrics,
                              may_write=elector.may_write)
    if health is not None:
        health.problems = operator.stuck_loops
    # No stop_flag: kopf handles SIGTERM/SIGINT itself once it runs (a stop_flag that is
    # never set would keep kopf waiting for its waiter task at exit); a stop requested
    # before that cancels kopf, which it takes as a request to stop too.
    kopf_task = asyncio.ensure_future(kopf.operator(
        standalone=True,
        clusterwide=not settings.namespaces,
        namespaces=settings.namespaces,
        memo=kopf.Memo(operator=operator),
    ))
    keeping = asyncio.ensure_future(elector.keep())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([kopf_task, keeping, stopping], return_when=asyncio.FIRST_COMPLETED)
    if keeping.done():
        # Another replica may act from LEASE_DURATION after the last renewal on: stop all
        # work now, without a graceful kopf shutdown that could still write.
        log.error("lost leadership: exiting so that the Deployment restarts this replica as a standby")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    stopping.cancel()
    keeping.cancel()
    if not kopf_task.done():
        kopf_task.cancel()
    try:
        await asyncio.wait_for(kopf_task, timeout=30.0)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        pass
    except Exception:  # kopf failed on its own; the exit code says so
        log.exception("kopf stopped with an error")
        return 1
    await operator.kube.close()
    return 0  # stopped on request (kopf handles SIGTERM/SIGINT itself once it runs)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ironic-shard-operator run` (configuration comes from the environment)."""
    import argparse

    argparse.ArgumentParser(
        prog="ironic-shard-operator run", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the operator: wait for the leader Lease, then reconcile every "
                    "IronicComputeShard it watches.",
        epilog=__doc__.split("\n\n", 1)[1]).parse_args(argv)
    debug = bool(os.environ.get("OPERATOR_DEBUG"))
    settings = Settings.from_env(os.environ)
    kopf.configure(verbose=debug, log_prefix=True, log_format=LOG_FORMATS[settings.log_format])
    log_redaction.install()  # no credential in the log, whoever logs it
    if not debug:  # kopf logs every handled pod event at INFO: keep the log about our actions
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    log.info("starting: identity %s, namespaces %s, Lease %s/%s", settings.identity,
             ",".join(settings.namespaces) or "(all)", settings.pod_namespace, LEASE_NAME)
    code = asyncio.run(run(settings))
    if code:
        # Whatever kopf left running must not act without the Lease: leave now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
