"""The real-Nova tier: real Ironic + the real Nova stack (hack/nova) + real nova-compute processes.

The fixtures (`ironic_service`, `nova_stack`, `nova_computes`) are registered by the root
conftest from tests/support/.
"""
