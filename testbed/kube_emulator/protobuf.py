"""Protobuf: decoding of the protobuf request bodies that kubectl's typed `create namespace`,
`create secret` and `create configmap` send (they never fall back to JSON), and the
DeleteOptions that helm's release storage sends with a DELETE. Only those kinds, and only the
fields they carry, are decoded; anything else is answered 415.
"""
import base64
from collections.abc import Iterator
from typing import Any

from testbed.kube_emulator.errors import ApiError, bad_request

_OBJECT_META = {1: ('name', 'string'), 2: ('generateName', 'string'), 3: ('namespace', 'string'),
                11: ('labels', 'map'), 12: ('annotations', 'map'), 14: ('finalizers', 'strings')}
_PROTOBUF_KINDS: dict[str, dict[int, tuple[str, Any]]] = {  # field numbers of k8s.io/api generated.proto
    'Namespace': {1: ('metadata', _OBJECT_META), 2: ('spec', {1: ('finalizers', 'strings')})},
    'ConfigMap': {1: ('metadata', _OBJECT_META), 2: ('data', 'map'), 3: ('binaryData', 'bytes-map'),
                  4: ('immutable', 'bool')},
    'Secret': {1: ('metadata', _OBJECT_META), 2: ('data', 'bytes-map'), 3: ('type', 'string'),
               4: ('stringData', 'map'), 5: ('immutable', 'bool')},
    'DeleteOptions': {1: ('gracePeriodSeconds', 'int'), 2: ('preconditions', {1: ('uid', 'string'),
                                                                            2: ('resourceVersion', 'string')}),
                      3: ('orphanDependents', 'present-bool'), 4: ('propagationPolicy', 'string'),
                      5: ('dryRun', 'strings')},
}


def _protobuf_fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """The (field number, value) pairs of one protobuf message, in wire order."""
    def varint(i: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            byte = buf[i]
            result |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if not byte & 0x80:
                return result, i
    i = 0
    while i < len(buf):
        key, i = varint(i)
        wire = key & 7
        if wire == 0:
            value, i = varint(i)
        elif wire == 2:
            size, i = varint(i)
            value, i = buf[i:i + size], i + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = buf[i:i + size], i + size
        else:
            raise bad_request(f'unsupported protobuf wire type {wire}')
        yield key >> 3, value


def _protobuf_message(buf: bytes, schema: dict[int, tuple[str, Any]]) -> dict[str, Any]:
    """Decode by schema; empty values are left out, as Go's omitempty leaves them out of JSON."""
    result: dict[str, Any] = {}
    for number, value in _protobuf_fields(buf):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, dict):
            if message := _protobuf_message(bytes(value), kind):
                result[name] = message
        elif kind == 'string' and value:
            result[name] = bytes(value).decode()
        elif kind == 'bool' and value:
            result[name] = True
        elif kind == 'present-bool':  # an optional bool: false when sent is not absent
            result[name] = bool(value)
        elif kind == 'int':  # an optional int64: 0 when sent is not absent; two's complement
            result[name] = int(value) - (1 << 64) if int(value) >= 1 << 63 else int(value)
        elif kind == 'strings':
            result.setdefault(name, []).append(bytes(value).decode())
        elif kind in ('map', 'bytes-map'):
            entry = dict(_protobuf_fields(bytes(value)))
            key, item = bytes(entry.get(1, b'')).decode(), bytes(entry.get(2, b''))
            result.setdefault(name, {})[key] = item.decode() if kind == 'map' else base64.b64encode(item).decode()
    return result


def decode_protobuf(body: bytes) -> dict[str, Any]:
    """A protobuf-encoded request body (the k8s envelope around runtime.Unknown) as JSON data."""
    if not body.startswith(b'k8s\x00'):
        raise bad_request('a protobuf body must start with the k8s envelope')
    envelope = dict(_protobuf_fields(body[4:]))
    type_meta = {number: bytes(value).decode() for number, value in _protobuf_fields(bytes(envelope.get(1, b'')))}
    api_version, kind = type_meta.get(1, ''), type_meta.get(2, '')
    if kind not in _PROTOBUF_KINDS:
        raise ApiError(415, 'UnsupportedMediaType', f'this fake Kubernetes API decodes protobuf only for '
                       f'{", ".join(_PROTOBUF_KINDS)}, not {kind!r}: send application/json', {})
    return dict(_protobuf_message(bytes(envelope.get(2, b'')), _PROTOBUF_KINDS[kind]), apiVersion=api_version, kind=kind)
