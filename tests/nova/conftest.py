"""The real-Nova tier: real Ironic + the real Nova stack (hack/nova) + real nova-compute processes.

`ironic_service` comes from the root conftest. The Nova fixtures come from
tests/support/nova_stack.py; they are imported here because pytest refuses `pytest_plugins`
outside the root conftest. Once tests/conftest.py registers "tests.support.nova_stack",
this import goes.
"""

from tests.support.nova_stack import (  # noqa: F401  (fixtures and the summary hook)
    nova_computes, nova_stack, pytest_terminal_summary)
