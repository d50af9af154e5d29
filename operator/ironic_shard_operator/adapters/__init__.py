"""Talking to the outside: Kubernetes, Ironic, Nova. Nothing here decides.

What belongs here: requests, pagination, retries, rate limits, error translation into each
adapter's own error types, and turning API documents into core's data. What does not: which
node to move, whether a write is safe, when to ask again: adapters ask core for those.
Adapters import core's data types, never the controller.
"""
