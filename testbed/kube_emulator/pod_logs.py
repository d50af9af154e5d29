"""Pod logs (PodLogs): `GET pods/NAME/log` answered as a real API server answers it, from the
text the fake kubelets hand in over a TEST-ONLY route (UPLOAD_ROUTE). A log is kept per pod uid (a
replacement of the same name starts empty) and forgotten with its pod. Details: README.md, "Pod
logs"."""
from __future__ import annotations

import re
from typing import Any

from testbed.kube_emulator.errors import bad_request, invalid

UPLOAD_ROUTE = re.compile(r'/testbed/kubelet/pods/(?P<uid>[^/]+)/containers/(?P<container>[^/]+)/log')
UNSUPPORTED = ('previous', 'sinceSeconds', 'sinceTime', 'timestamps', 'follow')


class PodLogs:
    """The containers' output as the fake kubelets last handed it in, by (pod uid, container)."""

    def __init__(self) -> None:
        self._texts: dict[tuple[str, str], bytes] = {}

    def put(self, pod_uid: str, container: str, text: bytes) -> None:
        self._texts[pod_uid, container] = text

    def forget(self, pod_uid: str) -> None:
        for key in [k for k in self._texts if k[0] == pod_uid]:
            del self._texts[key]

    def read(self, pod: dict[str, Any], params: dict[str, str], pods_type: Any) -> bytes:
        """The log a real server answers for `pod` and the query `params` (or the ApiError)."""
        name = pod['metadata']['name']
        for key in UNSUPPORTED:
            if params.get(key) not in (None, '', 'false'):
                raise bad_request(f'the fake API server does not serve pod logs with {key}')
        names = [c['name'] for c in pod['spec'].get('containers') or []]
        container = params.get('container')
        if not container:
            if len(names) != 1:
                raise bad_request(f'a container name must be specified for pod {name}, '
                                  f'choose one of: [{" ".join(names)}]')
            container = names[0]
        elif container not in names and container not in [c['name'] for c in pod['spec'].get('initContainers') or []]:
            raise bad_request(f'container {container} is not valid for pod {name}')
        numbers = {}
        for key in ('tailLines', 'limitBytes'):
            if params.get(key):
                try:
                    numbers[key] = int(params[key])
                except ValueError:
                    raise bad_request(f'invalid {key}: {params[key]!r}') from None
                if numbers[key] < (0 if key == 'tailLines' else 1):
                    raise invalid(pods_type, name, [(key, f'Invalid value: {numbers[key]}: must be greater than '
                                                          f'{"or equal to 0" if key == "tailLines" else "0"}')])
        if not pod['spec'].get('nodeName'):
            return b''
        statuses = {c['name']: c for c in (pod.get('status') or {}).get('containerStatuses') or []}
        state = (statuses.get(container) or {}).get('state') or {'waiting': {}}
        if 'waiting' in state and not statuses.get(container, {}).get('lastState'):
            reason = state['waiting'].get('reason') or 'ContainerCreating'
            raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
        text = self._texts.get((pod['metadata']['uid'], container), b'')
        if 'tailLines' in numbers:
            lines = text.splitlines(keepends=True)
            text = b''.join(lines[len(lines) - numbers['tailLines']:]) if numbers['tailLines'] else b''
        if 'limitBytes' in numbers:
            text = text[:numbers['limitBytes']]
        return text
