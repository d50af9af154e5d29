"""What openstacksdk's resources cost where the adapters call Nova and Ironic at scale, side by
side with the raw parse the adapters do instead, in one run.

Nova: a recorded-answer server (a thread on 127.0.0.1) answers the compute API's root,
`GET /os-services` (--services nova-compute services) and `GET /os-hypervisors/detail` in pages
of 1,000 (--nodes hypervisors shaped as Nova 2.53 reports Ironic nodes). Both sides go through
one NovaAdapter and its own transport:
  - hypervisors: the adapter's `hypervisors()` (raw pages) against openstacksdk's compute proxy
    `hypervisors(details=True)`, each item made into the adapter's Hypervisor. The SDK side is
    measured on --sdk-sample hypervisors and scaled to --nodes (one resource per item);
  - services: the adapter's `compute_services()` (openstacksdk) against the same answer parsed raw.
CPU is the measuring thread's own (time.thread_time): the server's work is not counted.

Ironic: a node of the listing (the `fields=` the adapter asks, read every cycle) and the answer
to a shard PATCH (a node as Ironic 1.82 returns it, recorded from the test bed's Ironic; a pool
adopting --nodes nodes writes each once), each read as the adapter reads it (`node_from_api`)
against openstacksdk's Node resource.

Memory: bytes held per object built (tracemalloc, --sdk-sample objects).

Usage: python bench/sdk_cost_bench.py [--nodes N] [--services M] [--sdk-sample S]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from openstack import connection
from openstack.baremetal.v1.node import Node as SdkNode
from openstack.compute.v2.hypervisor import Hypervisor as SdkHypervisor
from openstack.config import loader

from ironic_shard_operator.adapters.ironic import NODE_FIELDS, node_from_api
from ironic_shard_operator.adapters.nova import ComputeService, Hypervisor, NovaAdapter
from memory_bench import measured  # bench/, this script's folder

PAGE = 1000


def hypervisor_documents(count: int, members: int) -> list[dict[str, Any]]:
    """`GET /os-hypervisors/detail` items at 2.53 for Ironic nodes (Nova's fields, Ironic's values)."""
    rng = random.Random(7)

    def an_id() -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))

    return [{
        "id": an_id(), "hypervisor_hostname": an_id(), "state": "up", "status": "enabled",
        "service": {"host": f"pool-a-{i % members}", "id": an_id(), "disabled_reason": None},
        "hypervisor_type": "ironic", "hypervisor_version": 1, "host_ip": "10.0.0.5", "cpu_info": {},
        "current_workload": 0, "running_vms": 0, "vcpus": 0, "vcpus_used": 0, "memory_mb": 0,
        "memory_mb_used": 0, "free_ram_mb": 0, "local_gb": 0, "local_gb_used": 0, "free_disk_gb": 0,
        "disk_available_least": 0,
    } for i in range(count)]


def service_documents(count: int) -> list[dict[str, Any]]:
    """`GET /os-services?binary=nova-compute` items at 2.53."""
    return [{"id": str(uuid.UUID(int=i + 1, version=4)), "binary": "nova-compute", "host": f"pool-a-{i}",
             "zone": "nova", "status": "enabled", "state": "up", "forced_down": False, "disabled_reason": None,
             "updated_at": "2026-01-01T00:00:00.000000"} for i in range(count)]


def patch_answer() -> dict[str, Any]:
    """A node as Ironic 1.82 answers a shard PATCH (recorded from the test bed's Ironic)."""
    node = str(uuid.uuid4())
    links = {name: [{"href": f"http://ironic:6385/v1/nodes/{node}/{name}", "rel": "self"}]
             for name in ("portgroups", "ports", "states", "volume")}
    interfaces = {f"{name}_interface": "fake" for name in (
        "bios", "boot", "console", "deploy", "inspect", "management", "power", "raid", "rescue", "vendor")}
    unset = dict.fromkeys((
        "allocation_uuid", "automated_clean", "boot_mode", "chassis_uuid", "description", "fault",
        "inspection_finished_at", "inspection_started_at", "instance_uuid", "last_error", "lessee",
        "maintenance_reason", "name", "owner", "power_state", "protected_reason", "provision_updated_at",
        "retired_reason", "secure_boot", "target_power_state", "target_provision_state"))
    empty = {key: {} for key in ("clean_step", "deploy_step", "driver_info", "driver_internal_info", "extra",
                                 "instance_info", "network_data", "properties", "raid_config",
                                 "target_raid_config")}
    return {**unset, **empty, **interfaces, **links, "uuid": node, "shard": "pool-a-0", "driver": "fake-hardware",
            "conductor": "ironic-0", "conductor_group": "", "console_enabled": False, "maintenance": False,
            "protected": False, "retired": False, "network_interface": "noop", "storage_interface": "noop",
            "provision_state": "available", "reservation": None, "resource_class": "baremetal", "traits": [],
            "created_at": "2026-01-01T00:00:00+00:00", "updated_at": "2026-01-01T00:00:01+00:00",
            "links": [{"href": f"http://ironic:6385/v1/nodes/{node}", "rel": "self"}]}


class RecordedNova(BaseHTTPRequestHandler):
    """Answers as Nova 2.53 does, from the documents it was given (`serve`)."""

    services: bytes = b""
    hypervisors: list[dict[str, Any]] = []
    position: dict[str, int] = {}
    answered = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        RecordedNova.answered += 1
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        if url.path.rstrip("/") == "/v2.1":
            self.answer({"version": {"id": "v2.1", "version": "2.95", "min_version": "2.1", "status": "CURRENT"}})
        elif url.path == "/v2.1/os-services":
            self.answer(self.services if "host" not in query else {"services": []})
        elif url.path == "/v2.1/os-hypervisors/detail":
            start = self.position[query["marker"]] + 1 if "marker" in query else 0
            limit = int(query.get("limit", PAGE))
            page = self.hypervisors[start:start + limit]
            body: dict[str, Any] = {"hypervisors": page}
            if len(page) == limit:
                body["hypervisors_links"] = [{"rel": "next", "href": f"http://{self.headers['Host']}/v2.1/"
                                              f"os-hypervisors/detail?limit={limit}&marker={page[-1]['id']}"}]
            self.answer(body)
        else:
            self.send_error(404)

    def answer(self, body: dict[str, Any] | bytes) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serve(hypervisors: list[dict[str, Any]], services: list[dict[str, Any]]) -> Iterator[str]:
    """The recorded Nova's compute endpoint, while the block runs."""
    RecordedNova.hypervisors = hypervisors
    RecordedNova.position = {item["id"]: index for index, item in enumerate(hypervisors)}
    RecordedNova.services = json.dumps({"services": services}).encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordedNova)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v2.1"
    finally:
        server.shutdown()
        server.server_close()


def cpu(work: Callable[[], Any]) -> tuple[float, Any]:
    """(CPU seconds of this thread, the result) of `work()`."""
    gc.collect()
    started = time.thread_time()
    result = work()
    return time.thread_time() - started, result


def held_per_object(build: Callable[[], list[Any]]) -> float:
    """Bytes still held per object by what `build()` returns."""
    held, _, built = measured(build)
    return held / len(built)


def sdk_hypervisors(nova: NovaAdapter, count: int) -> list[Hypervisor]:
    listed = itertools.islice(nova._compute.hypervisors(details=True), count)
    return [Hypervisor(node_uuid=item.name, host=item.service_details["host"], up=item.state == "up",
                       enabled=item.status == "enabled") for item in listed]


def raw_services(nova: NovaAdapter) -> dict[str, ComputeService]:
    response = nova._compute.get(nova._url("/os-services", {"binary": "nova-compute"}))
    return {item["host"]: ComputeService(id=item["id"], host=item["host"], up=item["state"] == "up",
                                         enabled=item["status"] == "enabled", forced_down=bool(item["forced_down"]),
                                         disabled_reason=item["disabled_reason"])
            for item in response.json()["services"]}


def row(what: str, raw: float, sdk: float, unit: str) -> str:
    return f"  {what:<44} {raw:>10.3f} {sdk:>10.3f} {unit:<8} x{sdk / raw:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000, help="Ironic nodes: hypervisors, adoption writes")
    parser.add_argument("--services", type=int, default=200,
                        help="nova-compute services (200: 100,000 nodes at maxNodesPerMember 500)")
    parser.add_argument("--sdk-sample", type=int, default=3000,
                        help="openstacksdk resources actually built per measure (then scaled)")
    args = parser.parse_args(argv)
    sample = min(args.sdk_sample, args.nodes)
    hypervisors = hypervisor_documents(args.nodes, max(1, args.services))
    services = service_documents(args.services)
    cloud = loader.OpenStackConfig(load_yaml_config=False, load_envvars=False)

    with serve(hypervisors, services) as endpoint:
        region = cloud.get_one(auth_type="none", auth={"endpoint": endpoint}, compute_endpoint_override=endpoint)
        nova = NovaAdapter(connection.Connection(config=region), cloud_name="bench")
        nova.check()
        raw_list, listed = cpu(nova.hypervisors)
        sdk_part, sdk_listed = cpu(lambda: sdk_hypervisors(nova, sample))
        assert sdk_listed == list(listed[:sample]), "the two sides read different hypervisors"
        sdk_list = sdk_part * args.nodes / sample
        raw_svc, by_raw = cpu(lambda: raw_services(nova))
        sdk_svc, by_sdk = cpu(nova.compute_services)
        assert by_raw == by_sdk, "the two sides read different services"
        assert RecordedNova.answered == nova.requests_made, "a request went around the adapter's transport"

    answer = patch_answer()
    listed_node = {key: answer[key] for key in NODE_FIELDS}
    raw_listed, _ = cpu(lambda: [node_from_api(listed_node) for _ in range(sample)])
    sdk_listed, _ = cpu(lambda: [SdkNode.existing(**listed_node) for _ in range(sample)])
    raw_node, _ = cpu(lambda: [node_from_api(answer) for _ in range(sample)])
    sdk_node, _ = cpu(lambda: [SdkNode.existing(**answer) for _ in range(sample)])
    hypervisor_bytes = (held_per_object(lambda: [SdkHypervisor.existing(**item) for item in hypervisors[:sample]]),
                        held_per_object(lambda: [Hypervisor(item["hypervisor_hostname"], item["service"]["host"],
                                                            True, True) for item in hypervisors[:sample]]))

    print(f"{args.nodes} Ironic nodes, {args.services} nova-compute services; openstacksdk measured on "
          f"{sample} resources and scaled; CPU seconds of the calling thread")
    print(f"  {'':<44} {'raw':>10} {'sdk':>10}")
    print(row(f"list {args.nodes} hypervisors", raw_list, sdk_list, "s"))
    print(row("  per hypervisor", 1e6 * raw_list / args.nodes, 1e6 * sdk_list / args.nodes, "us"))
    print(row(f"list {args.services} compute services", raw_svc, sdk_svc, "s"))
    print(row("  per service", 1e6 * raw_svc / args.services, 1e6 * sdk_svc / args.services, "us"))
    print(row(f"read {args.nodes} listed nodes (a cycle)", raw_listed * args.nodes / sample,
              sdk_listed * args.nodes / sample, "s"))
    print(row("  per listed node", 1e6 * raw_listed / sample, 1e6 * sdk_listed / sample, "us"))
    print(row(f"read {args.nodes} shard PATCH answers (adoption)", raw_node * args.nodes / sample,
              sdk_node * args.nodes / sample, "s"))
    print(row("  per PATCH answer", 1e6 * raw_node / sample, 1e6 * sdk_node / sample, "us"))
    print(row("bytes held per hypervisor object", hypervisor_bytes[1], hypervisor_bytes[0], "B"))
    print(f"  requests the adapter counted: {nova.requests_made}, the server answered: {RecordedNova.answered}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
