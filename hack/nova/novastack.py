#!/usr/bin/env python3
"""The real Nova control plane on 127.0.0.1, for the demo and by hand (see README.md here).

  python3 hack/nova/novastack.py start [--run-dir DIR]   -> prints the state file's path
  python3 hack/nova/novastack.py status STATE_FILE
  python3 hack/nova/novastack.py compute-conf STATE_FILE --ironic-url URL
  python3 hack/nova/novastack.py stop STATE_FILE

What a stack is, and what it keeps to, is written in testbed/nova_starter.py (which this file
runs) and testbed/README.md ("The Nova starter"). Only the standard library is used, so any python3 >= 3.9 runs it.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: testbed

from testbed.nova_starter import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="hack/nova/novastack.py"))
