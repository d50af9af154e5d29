"""Test aids shipped with the package, named as such (as kopf ships kopf.testing).

standin.py is a stand-in nova-compute for clusters without Nova (the kind end-to-end test):
it lists its shard's nodes as nova-compute would. It is never part of a production pool and
imports nothing from the operator.
"""
