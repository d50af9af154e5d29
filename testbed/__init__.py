"""The local stand-ins and real peer services that the tests, the demo and the benchmarks run against.

What belongs here: code that tests/, hack/ and bench/ use to bring up the world the operator
lives in, and nothing that is a test (what each part does in detail: README.md):

- control_plane.py          the REAL Kubernetes control plane (etcd, kube-apiserver, controller-manager,
                            scheduler), built from Go modules by hack/kube/build.sh
- audit_log.py              what the API server's audit log tells: refusals, writes by token, unused grants
- certificates.py           a CA and the certificates it signs, for the test bed's own services
- kube_client.py            the official `kubernetes` client behind a small path-based interface, its
                            answers parsed by the client's models (any Kubernetes API server)
- api_paths.py              a resource URL of the Kubernetes API parsed into its parts (kube_client.py's)
- kubelet.py                the node agent: a kubelet without a container runtime (the one stand-in)
- kubelet_server.py         the node agent's kubelet API (container logs), which the API server calls
- process_kubelet.py        the node agent whose pods run as REAL nova-compute processes
- task_pods.py              a Job pod's nova-manage or shell script, run for real by the process kubelet
- operator_pods.py          the node agent whose operator pods (the chart's Deployment) run as REAL
                            `ironic-shard-operator run` processes
- service_account_tokens.py ServiceAccount tokens for a process, issued (or bound to a pod), rotated
                            and revoked
- operator_objects.py       the CRD and a pool's Secrets, created as a user creates them
- ironic_venv.py            Ironic's own virtualenv, and `ironic` installed into it (Keystone joins it)
- ironic_starter.py         the real Ironic service: install, start, stop (hack/ironic/service.py runs it)
- keystone_starter.py       the real Keystone (identity for Ironic's policy tests): start, stop, users
                            (hack/keystone/service.py runs it)
- registry.py               the real OCI registry (Debian's docker-registry; hack/registry.sh installs it)
                            with TLS or plain HTTP, optional auth, and a small pushed image
- service_process.py        one service's process group: start, wait until ready, stop with nothing left
- ironic_service.py         a running Ironic for Python callers, and helpers that fill it with nodes
- nova_starter.py           the real Nova stack: start, stop, computes (hack/nova/novastack.py runs it)
- nova_stack.py             a running Nova stack for Python callers (openstacksdk, nova-compute processes)
- procgroup.py              live processes and process groups, read from /proc
- ports.py                  a free TCP port
- waiting.py                wait_for: polling with a deadline CI can stretch (TEST_DEADLINE_SCALE)

The starters (but registry.py, which needs the venv's `cryptography`), service_process.py,
procgroup.py and ports.py use only the standard library (any python3 >= 3.9):
the commands in hack/ run them before the project's venv exists.

Direction: tests/, hack/ and bench/ import testbed; testbed imports none of them. It reads the
files that belong to the peers' side from hack/ (Ironic's config template, Nova's installer and
the entry points that run in Nova's venv). pytest fixtures and plugins stay in tests/support/,
command-line entry points in hack/.
"""
