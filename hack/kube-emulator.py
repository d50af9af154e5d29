#!/usr/bin/env python3
"""Run the FAKE Kubernetes API server (testbed/kube_emulator/) until SIGTERM or Ctrl-C.

    .venv/bin/python hack/kube-emulator.py [--port PORT] [--kubeconfig PATH] [--kubelet-namespace NS]

The first line on stdout is the path of a kubeconfig for it (written to a new temp dir unless
--kubeconfig says where); use it as KUBECONFIG for kubectl, `kopf run` or the operator. With
--kubelet-namespace, the fake kubelet (testbed/kubelet.py) also runs the pods of that
namespace (binds them to fake nodes and makes them Running and Ready).

On SIGTERM/SIGINT it stops the fake kubelet and the server and removes the kubeconfig it wrote;
nothing is left behind. Exit status 0 after a signal, 1 if it could not start.
"""
import argparse
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.kube_client import KubeClient  # noqa: E402
from testbed.kube_emulator import EmulatorThread, kubeconfig_text  # noqa: E402
from testbed.kubelet import FakeKubelet  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--port', type=int, default=0, help='TCP port on 127.0.0.1 (default: any free one)')
    parser.add_argument('--kubeconfig', type=Path, help='where to write the kubeconfig (default: a new temp dir)')
    parser.add_argument('--kubelet-namespace', help='also run the fake kubelet for the pods of this namespace')
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    temp_dir = None if args.kubeconfig else Path(tempfile.mkdtemp(prefix='kube-emulator-'))
    kubeconfig = args.kubeconfig or temp_dir / 'kubeconfig'
    try:
        with EmulatorThread(args.port) as emulator:
            kubeconfig.write_text(kubeconfig_text(emulator.url))
            kubelet = None
            if args.kubelet_namespace:
                kubelet = FakeKubelet(KubeClient(kubeconfig), args.kubelet_namespace).start()
            print(kubeconfig, flush=True)
            print(f'fake Kubernetes API at {emulator.url}' + (f', fake kubelet for namespace '
                  f'{args.kubelet_namespace}' if kubelet else '') + '; stop with SIGTERM or Ctrl-C', file=sys.stderr)
            try:
                stop.wait()
            finally:
                if kubelet is not None:
                    kubelet.stop()
    except (OSError, RuntimeError) as e:
        print(f'kube-emulator: {e}', file=sys.stderr)
        return 1
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)
        elif args.kubeconfig is not None and args.kubeconfig.exists():
            args.kubeconfig.unlink()
    return 0


if __name__ == '__main__':
    sys.exit(main())
