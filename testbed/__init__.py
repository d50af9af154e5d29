"""The local stand-ins and real peer services that the tests, the demo and the benchmarks run against.

What belongs here: code that tests/, hack/ and bench/ all use to bring up the world the operator
lives in, and nothing that is a test:

- kube_emulator/     the FAKE Kubernetes API server (the only fake of a peer; see its server.py)
- kube_client.py     a small synchronous client for any Kubernetes API server
- kubelet.py         a FAKE kubelet (and scheduler) for API servers where no kubelet runs pods
- waiting.py         wait_for: polling with a deadline CI can stretch (TEST_DEADLINE_SCALE)

Direction: tests/, hack/ and bench/ import testbed; testbed imports none of them. pytest
fixtures and plugins stay in tests/support/, command-line entry points in hack/.
"""
