"""What a member's resource-tracker interval costs Nova and Placement: one real nova-compute
(Ironic driver) serving N fake-hardware nodes of a real Ironic, against the real Nova stack and
Placement the tests use (testbed/nova_starter.py), run in turn at each interval given (the
`[DEFAULT]update_resources_interval` an operator-rendered overlay sets, read second as in a member
pod), each for the same measuring window once every node is listed under the compute.

Measured from the services' own logs, nothing sampled through the APIs (which would count too):
- Placement: the requests it served in the window (its access log, one line a request), per
  minute and per resource-tracker pass, by method;
- nova-compute: its resource-tracker passes in the window ("Running periodic task
  ComputeManager.update_available_resource" to the last "Final resource view", bench/nova_measures.py),
  how long each took, and the CPU seconds the compute process used (per minute);
- Nova's conductor: the CPU seconds it used (the compute reaches the database through it).

Output: a comparison table, and the numbers as JSON at --out (bench/results/tracker_cost.json).
Usage: .venv/bin/python bench/tracker_cost_bench.py [--nodes 200] [--intervals 10,60] [--window 180]
(`make bench-tracker`; about 3 + 2 x (window + settle) minutes; not in CI)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # testbed, bench: run as a script

from bench.nova_measures import PassLog, median  # noqa: E402
from testbed import nova_starter  # noqa: E402
from testbed.ironic_service import running_ironic, seed_nodes_directly_in_db  # noqa: E402
from testbed.nova_stack import NovaStack  # noqa: E402
from testbed.waiting import wait_for  # noqa: E402

RESOURCE_CLASS = "bench-tracker"
HOST = "tracker-0"
# One line of Placement's access log (placement's request log middleware): the method and path.
REQUEST = re.compile(r'"(GET|PUT|POST|DELETE|PATCH) (/\S*)')


class LogTail:
    """A log file read on from where it was left: `new_lines()` gives what was written since."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def skip(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def new_lines(self) -> list[str]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offset += len(complete)
        return complete.decode(errors="replace").splitlines()


def overlay(workdir: Path, interval: int) -> Path:
    """The member overlay as the operator renders it: host, and the tracker's interval."""
    path = workdir / f"{HOST}-{interval}.conf"
    path.write_text(f"[DEFAULT]\nhost = {HOST}\nupdate_resources_interval = {interval}\n")
    return path


def listed_nodes(stack: NovaStack) -> int:
    """Nodes Nova's hypervisor list shows under the compute."""
    return sum(HOST in hosts for hosts in stack.hypervisor_hosts().values())


def measure(stack: NovaStack, base: Path, workdir: Path, interval: int, nodes: int, window: float) -> dict:
    """Start the compute at `interval`, wait until it lists every node and has run one pass since,
    then count over `window` seconds; the compute is stopped afterwards."""
    logs = stack.run_dir / "logs"
    compute_log, placement_log = LogTail(logs / f"{HOST}.log"), LogTail(logs / "placement-api.log")
    compute_log.skip()
    stack.start_compute(HOST, [base, overlay(workdir, interval)])
    try:
        wait_for(lambda: HOST in stack.compute_services(), timeout=120, interval=0.5, what=f"{HOST} registered")
        stack.discover_hosts()
        wait_for(lambda: listed_nodes(stack) >= nodes, timeout=300 + 0.5 * nodes, interval=5,
                 what=f"{nodes} nodes listed under {HOST}")
        passes = PassLog()
        wait_for(lambda: passes.feed(compute_log.new_lines()) or passes.passes, timeout=2 * interval + 0.5 * nodes,
                 interval=1, what="one complete resource-tracker pass")
        placement_log.skip()
        cpu_before, started = nova_starter.cpu_seconds(stack.run_dir), time.monotonic()
        passes = PassLog()
        time.sleep(window)  # the measuring window: the services run undisturbed
        elapsed = time.monotonic() - started
        cpu_after = nova_starter.cpu_seconds(stack.run_dir)
        passes.feed(compute_log.new_lines())
        requests = [m.group(1) for line in placement_log.new_lines() if (m := REQUEST.search(line))]
    finally:
        nova_starter.terminate(stack.run_dir, HOST)
    return summary(interval, elapsed, passes, requests, cpu_before, cpu_after)


def summary(interval: int, elapsed: float, passes: PassLog, requests: list[str], cpu_before: dict,
            cpu_after: dict) -> dict:
    per_minute = 60.0 / elapsed
    done = passes.passes
    by_method: dict[str, int] = {}
    for method in requests:
        by_method[method] = by_method.get(method, 0) + 1
    cpu = {name: round((cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0)) * per_minute, 2)
           for name in (HOST, "nova-conductor", "placement-api")}
    return {
        "interval_seconds": interval, "window_seconds": round(elapsed, 1),
        "passes": len(done), "passes_per_minute": round(len(done) * per_minute, 2),
        "median_pass_seconds": round(median([p.seconds for p in done]) or 0.0, 2),
        "placement_requests": len(requests), "placement_requests_per_minute": round(len(requests) * per_minute, 1),
        "placement_requests_per_pass": round(len(requests) / len(done), 1) if done else None,
        "placement_requests_by_method": by_method,
        "cpu_seconds_per_minute": cpu,
    }


def table(results: dict) -> str:
    rows = [("interval (s)", "interval_seconds"), ("passes / min", "passes_per_minute"),
            ("median pass (s)", "median_pass_seconds"), ("Placement requests / min", "placement_requests_per_minute"),
            ("Placement requests / pass", "placement_requests_per_pass")]
    runs = results["runs"]
    lines = [f"{'':<28}" + "".join(f"{'run ' + str(i + 1):>14}" for i in range(len(runs)))]
    for label, key in rows:
        lines.append(f"{label:<28}" + "".join(f"{str(run[key]):>14}" for run in runs))
    for name in (HOST, "nova-conductor", "placement-api"):
        lines.append(f"{'CPU s/min ' + name:<28}" + "".join(f"{run['cpu_seconds_per_minute'][name]:>14}" for run in runs))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--intervals", default="10,60", help="comma-separated update_resources_interval values")
    parser.add_argument("--window", type=float, default=180.0, help="seconds measured per interval")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "tracker_cost.json")
    args = parser.parse_args()
    intervals = [int(v) for v in args.intervals.split(",")]
    load = os.getloadavg()[0]
    print(f"tracker cost bench: {args.nodes} nodes, intervals {intervals}, window {args.window:g} s; "
          f"load average {load:.1f} on {os.cpu_count()} cores", flush=True)
    results: dict = {"settings": {"nodes": args.nodes, "intervals": intervals, "window": args.window,
                                  "load_average_at_start": load, "cores": os.cpu_count()}, "runs": []}
    with ExitStack() as cleanup:
        workdir = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="tracker-bench-")))
        ironic = cleanup.enter_context(running_ironic(workdir / "ironic", auth="noauth"))
        seed_nodes_directly_in_db(ironic, args.nodes, resource_class=RESOURCE_CLASS, powered_off=True)
        state = nova_starter.start(workdir / "nova", owner_pid=os.getpid(), compute_debug=True)
        cleanup.callback(nova_starter.stop, state)
        stack = NovaStack(state)
        base = workdir / "nova.conf"
        base.write_text(stack.compute_conf(ironic.cloud))
        for interval in intervals:
            run = measure(stack, base, workdir, interval, args.nodes, args.window)
            print(json.dumps(run), flush=True)
            results["runs"].append(run)
    results["settings"]["load_average_at_end"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(table(results))
    print(f"\nJSON: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
