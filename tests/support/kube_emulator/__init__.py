"""The FAKE Kubernetes API server (see server.py)."""
from tests.support.kube_emulator.server import EmulatorThread, kubeconfig_text

__all__ = ['EmulatorThread', 'kubeconfig_text']
