#!/usr/bin/env python3
"""The real Keystone (PyPI `keystone`, served by gunicorn) on 127.0.0.1, for tests.

    python3 hack/keystone/service.py install
    python3 hack/keystone/service.py start STATE_DIR [--port N]
    python3 hack/keystone/service.py stop STATE_DIR
    python3 hack/keystone/service.py status STATE_DIR

What each command does is written in testbed/README.md ("The Keystone starter"); this file runs
testbed/keystone_starter.py. Only the standard library is used, so any python3 >= 3.9 runs it,
before the project's venv exists.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: testbed

from testbed.keystone_starter import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="hack/keystone/service.py"))
