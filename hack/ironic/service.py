#!/usr/bin/env python3
"""The real Ironic service (PyPI `ironic`), standalone on 127.0.0.1, for tests and the demo.

    python3 hack/ironic/service.py install
    python3 hack/ironic/service.py start STATE_DIR [--auth noauth|http_basic|keystone] [--port N]
                                                   [--keystone KEYSTONE_STATE_DIR]
                                                   [--host-ip IP] [--conductor-group NAME]
                                                   [--pin-release RELEASE] [--max-limit N]
    python3 hack/ironic/service.py stop STATE_DIR
    python3 hack/ironic/service.py status STATE_DIR

What each command does is written in testbed/README.md ("The Ironic starter"); this file runs
testbed/ironic_starter.py. Only the standard library is used, so any python3 >= 3.9 runs it,
before the project's venv exists.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: testbed

from testbed.ironic_starter import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="hack/ironic/service.py"))
