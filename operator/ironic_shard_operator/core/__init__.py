"""Everything that decides, pure: observations in, decisions out.

What belongs here: the rules of the product (who owns which node, which pod to create,
replace or fence, when a member counts as ready, what a shard write may do, what to tell
Nova, what the status says) as plain functions over plain data, each unit-tested without
I/O. What does not: HTTP, Kubernetes or OpenStack clients, kopf, threads, clocks (time is
passed in as `now`), environment variables. tests/unit/test_import_contract.py enforces it.
"""
