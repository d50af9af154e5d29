"""The user's own `kubectl`, for the commands a user runs (`kubectl ics`, `preflight --pool`).
Talks, decides nothing.

Why kubectl and not adapters/kube.py: a kubectl plugin is started by kubectl, so kubectl is
there, and going through it gives the user's kubeconfig exactly as kubectl reads it
(KUBECONFIG, --kubeconfig, --context, exec credential plugins, -n and the context's
namespace) with nothing re-implemented. The operator itself never uses this module.

Every call is one kubectl command; `writes` lists the mutating ones, so a test can assert
that a read-only command wrote nothing.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

RESOURCE = "ironiccomputeshards.ironicshards.io"


class KubectlError(Exception):
    """kubectl failed; the message is kubectl's own error text (one line)."""


class NotFound(KubectlError):
    """The object does not exist."""


@dataclass
class Kubectl:
    """kubectl with the user's connection flags (`--kubeconfig`, `--context`) and namespace
    (None: the context's own)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    binary: str = "kubectl"
    writes: list[str] = field(default_factory=list)

    def flags(self) -> list[str]:
        out = []
        if self.kubeconfig:
            out.append(f"--kubeconfig={self.kubeconfig}")
        if self.context:
            out.append(f"--context={self.context}")
        if self.namespace:
            out.append(f"--namespace={self.namespace}")
        return out

    def run(self, args: Sequence[str], *, timeout: float = 60.0) -> str:
        """kubectl's stdout for `args` (with the connection flags); KubectlError otherwise."""
        binary = shutil.which(self.binary)
        if binary is None:
            raise KubectlError(f"{self.binary} is not on PATH: install kubectl, it reads your kubeconfig")
        done = subprocess.run([binary, *self.flags(), *args], capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            message = " ".join(done.stderr.split()) or f"kubectl exited {done.returncode}"
            raise (NotFound if "NotFound" in message or "not found" in message else KubectlError)(message)
        return done.stdout

    def get(self, resource: str, name: str | None = None, *, selector: str | None = None) -> Any:
        """One object (or a list when `name` is None) as JSON."""
        args = ["get", resource, *([name] if name else []), "-o", "json"]
        if selector:
            args += ["-l", selector]
        return json.loads(self.run(args))

    def get_pool(self, name: str) -> dict[str, Any]:
        return self.get(RESOURCE, name)

    def secret_text(self, name: str, key: str) -> str | None:
        """The decoded value of `key` in Secret `name` (None: no such key)."""
        value = (self.get("secret", name).get("data") or {}).get(key)
        return None if value is None else base64.b64decode(value).decode("utf-8", errors="replace")

    def events_of(self, kind: str, name: str) -> list[dict[str, Any]]:
        """The Events about object `kind`/`name` in the namespace."""
        items = self.get("events").get("items", [])
        return [e for e in items
                if (e.get("involvedObject") or {}).get("kind") == kind and e["involvedObject"].get("name") == name]

    def merge_patch(self, resource: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of `name`; the object as the API server returned it."""
        self.writes.append(f"patch {resource}/{name}")
        return json.loads(self.run(["patch", resource, name, "--type=merge", "-p", json.dumps(patch),
                                    "-o", "json"]))

    def current_namespace(self) -> str:
        """The namespace commands act in: -n, else the context's, else 'default'."""
        if self.namespace:
            return self.namespace
        found = self.run(["config", "view", "--minify", "-o", "jsonpath={..namespace}"]).strip()
        return found or "default"
