"""The real-Nova tier: real Ironic + the real Nova stack (hack/nova) + real nova-compute processes.

The fixtures come from tests/support/. They are imported here because pytest refuses
`pytest_plugins` outside the root conftest; once tests/conftest.py registers
"tests.support.nova_stack" and "tests.support.ironic_service", these imports go.
"""

from tests.support.ironic_service import ironic_service  # noqa: F401  (fixture)
from tests.support.nova_stack import (  # noqa: F401  (fixtures and the summary hook)
    nova_computes, nova_stack, pytest_terminal_summary)
