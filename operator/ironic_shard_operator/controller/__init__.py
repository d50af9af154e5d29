"""Wiring: kopf handlers, the per-pool loop, reconcile as named steps, leader election.

What belongs here: the order in which a cycle observes (through adapters), asks core to
decide, acts (through adapters) and reports; process concerns (the Lease, health and metrics
endpoints). What does not: a rule that could be a pure function; put that in core and call it.
"""
