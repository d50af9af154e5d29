"""WSGI entry point that gunicorn serves as the test Nova compute API (hack/nova only).

Nova's `nova.wsgi.osapi_compute` parses `sys.argv` with oslo.config at import time, so under
gunicorn it would read gunicorn's own arguments and fail. This module gives it a clean argv first;
the config files come from OS_NOVA_CONFIG_DIR / OS_NOVA_CONFIG_FILES (set by testbed/nova_starter.py).
"""

import sys

sys.argv = ["nova-api-os-compute"]

from nova.wsgi.osapi_compute import application  # noqa: E402  (argv must be set first)

__all__ = ["application"]
