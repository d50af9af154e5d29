"""TEST SETUP SHORTCUT: the Neutron answers nova-api needs to show a server, for a cloud with no network.

The test bed runs no Neutron (nothing here boots a real instance: hack/nova/seed_instance.py
records them with an empty network). Yet nova-api asks Neutron for the ports of every server it
shows (`GET /servers/{id}`, `/servers/detail`: their security groups) and for those of a server
it deletes locally (its host down: `_local_delete` frees its ports); with no network endpoint it
answers 500. This WSGI app answers those questions as a Neutron with no ports would: no port,
no security group, nothing to delete. Anything else is answered 404 and logged, so a new
question from Nova shows up instead of being answered wrongly.

    gunicorn --pythonpath hack/nova neutron_standin:application
"""

from __future__ import annotations

import json
import logging
import re

log = logging.getLogger("neutron-standin")

# GET /v2.0/ports(.json), /v2.0/security-groups(.json): the lists nova-api reads, always empty.
EMPTY_LISTS = {"ports": re.compile(r"^/v2\.0/ports(\.json)?$"),
               "security_groups": re.compile(r"^/v2\.0/security-groups(\.json)?$")}


def application(environ, start_response):
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    if method == "GET":
        for key, pattern in EMPTY_LISTS.items():
            if pattern.match(path):
                return _answer(start_response, "200 OK", {key: []})
        if path in ("", "/"):
            return _answer(start_response, "200 OK", {"versions": [{"id": "v2.0", "status": "CURRENT"}]})
    log.warning("neutron stand-in: no answer for %s %s?%s", method, path, environ.get("QUERY_STRING", ""))
    return _answer(start_response, "404 Not Found", {"NeutronError": {
        "type": "HTTPNotFound", "message": f"the test bed's Neutron stand-in has no {method} {path}"}})


def _answer(start_response, status: str, body: dict) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]
