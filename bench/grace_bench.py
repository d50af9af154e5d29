"""How long the pods the operator deletes need to stop: the numbers behind the defaults of
spec.terminationGracePeriodSeconds (member pods) and spec.handover.jobTerminationGracePeriodSeconds
(handover and host-mapping Job pods); docs/design.md, "Termination grace periods".

One real Ironic (fake hardware), the real Nova stack of the tests (testbed/nova_starter.py) with
Nova's OWN shutdown settings (graceful_shutdown_timeout and manager_shutdown_timeout as the
installed Nova defaults them, read from it; the other timings test-speed), two real nova-compute
members (Ironic driver, each its own shard), instances seeded on the first member's nodes as the
tests seed them (tests/nova/handover_pool.py::seed_instances), and Nova kept busy the whole time
by clients reading its API (hypervisors, services, servers: each read goes to the database
through nova-api), on a machine whose other users add their own load (the load average is
printed). Measured, in this order:

1. anchor: a bare `nova-manage --version` (its interpreter start and imports), idle and under load;
2. member shutdown: SIGTERM to the first member (its nodes, their instances, a resource-tracker
   pass done) until its last process has exited, what a kubelet waits for after deleting its pod;
3. nova-manage runs, as a handover Job runs them: the member forced down (as the operator does
   first), `nova-manage db ironic_compute_node_move` for single nodes (each timed), then one
   batch of --batch nodes through the handover Job's own script (core/handover_job.py::script;
   the operator's default spec.handover.maxConcurrent is 10);
4. a second member shutdown: the destination, which now serves the moved instances.

A Job's pod asked to stop finishes the run under way and starts no other: its grace must cover
ONE run; a member's grace must cover nova-compute's graceful shutdown, which Nova bounds itself
by graceful_shutdown_timeout (after it, oslo.service exits the process). Printed: what was
measured, on which machine and when, and the same as JSON at --out.
Usage: .venv/bin/python bench/grace_bench.py [--nodes 30] [--batch 10] [--out PATH]
(about 8 minutes on 2 cores under load; not in CI)
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # testbed, tests, bench: run as a script
sys.path.insert(0, str(REPO / "operator"))

from bench.nova_measures import median  # noqa: E402
from ironic_shard_operator.core.handover_job import CONFIG_PATH, script  # noqa: E402
from ironic_shard_operator.core.model import Move  # noqa: E402
from testbed import nova_starter  # noqa: E402
from testbed.ironic_service import running_ironic, seed_nodes_directly_in_db  # noqa: E402
from testbed.nova_stack import NovaStack  # noqa: E402
from testbed.waiting import wait_for  # noqa: E402
from tests.nova.handover_pool import seed_instances  # noqa: E402

RESOURCE_CLASS = "bench-grace"
SOURCE, DESTINATION = "grace-0", "grace-1"
SINGLE_RUNS = 3
LOAD_CLIENTS = 3


def nova_shutdown_defaults(venv: Path) -> dict[str, int]:
    """graceful_shutdown_timeout and manager_shutdown_timeout as the installed Nova defaults
    them (Nova overrides oslo.service's 60 s)."""
    code = ("import nova.conf; from oslo_config import cfg; cfg.CONF([], project='nova', default_config_files=[]); "
            "print(cfg.CONF.graceful_shutdown_timeout, cfg.CONF.manager_shutdown_timeout)")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, timeout=120,
                          check=True)
    graceful, manager = done.stdout.split()[-2:]
    return {"graceful_shutdown_timeout": int(graceful), "manager_shutdown_timeout": int(manager)}


def nova_version(venv: Path) -> str:
    done = subprocess.run([str(venv / "bin" / "python"), "-c", "import nova.version as v; print(v.version_string())"],
                          capture_output=True, text=True, timeout=120)
    return done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip() else "unknown"


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    return {"host": platform.node(), "cpu": model, "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}


class NovaLoad:
    """LOAD_CLIENTS threads reading Nova's API back to back (each its own client): the hypervisor
    list, the compute services, every server; counts the reads done."""

    def __init__(self, state: dict) -> None:
        self.state, self.reads, self.errors = state, 0, 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        reads = (lambda s: s.hypervisor_hosts(), lambda s: s.compute_services(),
                 lambda s: s._get_all("/servers?all_tenants=1", "servers"))
        self._threads = [threading.Thread(target=self._run, args=(reads[i % len(reads)],), daemon=True)
                         for i in range(LOAD_CLIENTS)]

    def _run(self, read) -> None:
        stack = NovaStack(self.state)
        while not self._stop.is_set():
            try:
                read(stack)
                done, failed = 1, 0
            except Exception:  # a busy nova-api may time out: the load goes on
                done, failed = 0, 1
            with self._lock:
                self.reads, self.errors = self.reads + done, self.errors + failed

    def __enter__(self) -> NovaLoad:
        self.started = time.monotonic()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
        self.seconds = time.monotonic() - self.started


def timed(argv: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    return time.monotonic() - started, done


def anchor(venv: Path) -> float:
    """Median of three bare `nova-manage --version` starts."""
    return median([timed([str(venv / "bin" / "nova-manage"), "--version"])[0] for _ in range(3)])


def shutdown_seconds(stack: NovaStack, name: str) -> float:
    """SIGTERM to the member's process group until none of it is left (SIGKILL only after 600 s)."""
    started = time.monotonic()
    nova_starter.terminate(stack.run_dir, name, sig=signal.SIGTERM, timeout=600.0)
    return time.monotonic() - started


def overlay(workdir: Path, member: str) -> Path:
    """The member overlay as the operator renders it: host and shard are the member's name."""
    path = workdir / f"{member}.conf"
    path.write_text(f"[DEFAULT]\nhost = {member}\n\n[ironic]\nshard = {member}\n")
    return path


def listed(stack: NovaStack, host: str) -> int:
    return sum(host in hosts for hosts in stack.hypervisor_hosts().values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=30, help="nodes of the first member (instances on single runs + batch)")
    parser.add_argument("--batch", type=int, default=10, help="nodes of the Job script's batch (spec.handover.maxConcurrent)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "grace.json")
    args = parser.parse_args()
    if args.nodes < SINGLE_RUNS + args.batch:
        parser.error(f"--nodes must be at least {SINGLE_RUNS} + --batch")
    venv = nova_starter.VENV
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    defaults = nova_shutdown_defaults(venv)
    results: dict = {"when": when, "machine": machine(), "nova": nova_version(venv), "nova_shutdown_defaults": defaults,
                     "settings": {"nodes": args.nodes, "batch": args.batch, "load_clients": LOAD_CLIENTS},
                     "load_average_at_start": os.getloadavg()[0]}
    print(f"grace bench, {when} on {results['machine']['host']} ({results['machine']['cores']} x "
          f"{results['machine']['cpu']}), nova {results['nova']}, load average {results['load_average_at_start']:.1f}; "
          f"Nova's own shutdown settings: {defaults}", flush=True)
    with ExitStack() as cleanup:
        workdir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="grace-bench-")))
        ironic = cleanup.enter_context(running_ironic(workdir / "ironic", auth="noauth"))
        source_nodes = seed_nodes_directly_in_db(ironic, args.nodes, resource_class=RESOURCE_CLASS, shard=SOURCE,
                                                 powered_off=True)
        seed_nodes_directly_in_db(ironic, 5, resource_class=RESOURCE_CLASS, shard=DESTINATION, powered_off=True)
        state = nova_starter.start(workdir / "nova", owner_pid=os.getpid(), timings=defaults)
        cleanup.callback(nova_starter.stop, state)
        stack = NovaStack(state)
        base = workdir / "nova.conf"
        base.write_text(stack.compute_conf(ironic.cloud))
        for member in (SOURCE, DESTINATION):
            stack.start_compute(member, [base, overlay(workdir, member)])
        cleanup.callback(nova_starter.terminate, stack.run_dir, [SOURCE, DESTINATION])
        wait_for(lambda: {SOURCE, DESTINATION} <= set(stack.compute_services()), timeout=180, interval=1,
                 what="both members registered")
        stack.discover_hosts()
        wait_for(lambda: listed(stack, SOURCE) >= args.nodes and listed(stack, DESTINATION) >= 5, timeout=300,
                 interval=2, what="every node listed under its member")
        instances = seed_instances(stack, ironic, {n: SOURCE for n in source_nodes}, (SOURCE,),
                                   SINGLE_RUNS + args.batch)
        moving = sorted(instances)
        results["anchor_idle_seconds"] = round(anchor(venv), 2)
        print(f"anchor, idle: nova-manage --version {results['anchor_idle_seconds']} s", flush=True)
        with NovaLoad(state) as load:
            time.sleep(10)  # the readers up to speed
            results["anchor_loaded_seconds"] = round(anchor(venv), 2)
            print(f"anchor, under load: nova-manage --version {results['anchor_loaded_seconds']} s", flush=True)
            results["member_shutdown_seconds"] = [round(shutdown_seconds(stack, SOURCE), 2)]
            print(f"member shutdown ({SOURCE}: {args.nodes} nodes, {len(instances)} instances): "
                  f"{results['member_shutdown_seconds'][0]} s", flush=True)
            stack.set_forced_down(SOURCE, True)  # the operator's step once the pod is gone
            manage = [str(venv / "bin" / "nova-manage"), "--config-file", str(stack.nova_conf), "db",
                      "ironic_compute_node_move"]
            singles = []
            for node in moving[:SINGLE_RUNS]:
                seconds, done = timed([*manage, "--ironic-node-uuid", node, "--destination-host", DESTINATION])
                if done.returncode != 0:
                    raise RuntimeError(f"nova-manage move of {node} failed: {done.stdout}{done.stderr}")
                singles.append(round(seconds, 2))
            results["single_run_seconds"] = singles
            print(f"nova-manage ironic_compute_node_move, single runs: {singles} s", flush=True)
            batch = [Move(node, SOURCE, DESTINATION) for node in moving[SINGLE_RUNS:SINGLE_RUNS + args.batch]]
            text = script(batch).replace(shlex.quote(CONFIG_PATH), shlex.quote(str(stack.nova_conf)))
            env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
            seconds, done = timed(["/bin/sh", "-c", text], env=env)
            if done.returncode != 0:
                raise RuntimeError(f"the batch failed ({done.returncode}): {done.stdout}{done.stderr}")
            results["batch_seconds"] = round(seconds, 2)
            results["batch_seconds_per_node"] = round(seconds / len(batch), 2)
            print(f"the Job's script, a batch of {len(batch)}: {results['batch_seconds']} s "
                  f"({results['batch_seconds_per_node']} s a node)", flush=True)
            wait_for(lambda: all(stack.hypervisor_hosts().get(n) == [DESTINATION] for n in moving[:SINGLE_RUNS
                                                                                         + args.batch]),
                     timeout=120, interval=2, what="Nova lists every moved node under the destination")
            results["member_shutdown_seconds"].append(round(shutdown_seconds(stack, DESTINATION), 2))
            print(f"member shutdown ({DESTINATION}, now serving the {len(instances)} moved instances): "
                  f"{results['member_shutdown_seconds'][1]} s", flush=True)
        results["load"] = {"reads": load.reads, "failed_reads": load.errors, "seconds": round(load.seconds, 1),
                           "reads_per_second": round(load.reads / load.seconds, 2)}
    results["load_average_at_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(f"measured {when} on {results['machine']['host']} ({results['machine']['cores']} cores), nova "
          f"{results['nova']}, load average {results['load_average_at_start']:.1f} -> {results['load_average_at_end']:.1f}, "
          f"Nova API reads {results['load']['reads_per_second']}/s by {LOAD_CLIENTS} clients meanwhile")
    print(f"  anchor nova-manage --version      idle {results['anchor_idle_seconds']} s, loaded "
          f"{results['anchor_loaded_seconds']} s")
    print(f"  member SIGTERM -> exited          {results['member_shutdown_seconds']} s "
          f"(Nova's bound: graceful_shutdown_timeout {defaults['graceful_shutdown_timeout']} s)")
    print(f"  one nova-manage move (loaded)     {singles} s")
    print(f"  batch of {len(batch)} (Job script, loaded)  {results['batch_seconds']} s")
    print(f"\nJSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
