"""Pod logs: `GET /api/v1/namespaces/NS/pods/NAME/log` as a real API server answers it.

On a real cluster the API server proxies the request to the pod's kubelet, which reads the
container runtime's log. Here the FAKE kubelets (testbed/kubelet.py, testbed/process_kubelet.py)
hand the fake their containers' output over a TEST-ONLY route that no real API server has:

    PUT /testbed/kubelet/pods/<pod uid>/containers/<container>/log   body {"log": "<whole text>"}

(a non-resource URL: only the cluster administrator, i.e. a request without a token, may call
it). The text is kept per pod uid, so a replacement pod with the same name starts empty, and is
forgotten with the pod. Against a real API server the route does not exist (404) and the real
kubelet serves real logs.

What a read answers (text/plain; errors as Status, as the API server and kubelet word them):
- the pod is not bound to a node: an empty log (the API server has no kubelet to ask);
- no `container` and more than one container: 400 "a container name must be specified for
  pod P, choose one of: [a b]"; an unknown container: 400 "container c is not valid for pod P";
- a container not started (no status, or waiting): 400 `container "c" in pod "P" is waiting to
  start: <reason>` (ContainerCreating when the kubelet gave none);
- else the text: whole, or its last `tailLines` lines, cut to `limitBytes`.
Not modelled: `previous`, `sinceSeconds`, `sinceTime`, `timestamps`, `follow` (answered 400, so
that no caller believes it got what it asked for), and the separation of stdout and stderr.
"""
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
