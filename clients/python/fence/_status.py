"""Decoding the facts of a refusal (docs/protocol.md §1): a google.rpc.Status
in the grpc-status-details-bin trailer, whose details are Any messages of
type fence.v1.NotLeader, LockHeld, StaleToken, RanRecently or PermitsMismatch.

Debian has no grpcio-status, so google/rpc/status.proto is vendored
(vendor/, from googleapis) and its descriptor compiled by generate.sh into
_rpc_status_pb.py. It is loaded into a private descriptor pool, not the
default one, so a process that also imports googleapis-common-protos'
google.rpc.status_pb2 (perhaps of another version) never sees a clash.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message, message_factory

from . import _rpc_status_pb
from .v1 import fence_pb2

_pool = descriptor_pool.DescriptorPool()
_pool.Add(descriptor_pb2.FileDescriptorProto.FromString(any_pb2.DESCRIPTOR.serialized_pb))
_pool.Add(descriptor_pb2.FileDescriptorProto.FromString(_rpc_status_pb.SERIALIZED_FILE))
_status_desc = _pool.FindMessageTypeByName("google.rpc.Status")
_get_class: Optional[Callable[[Any], Any]] = getattr(message_factory, "GetMessageClass", None)
# protobuf >= 4.22 has GetMessageClass; 4.21 (Debian 12) only the factory.
Status: Any = _get_class(_status_desc) if _get_class else message_factory.MessageFactory(_pool).GetPrototype(_status_desc)

Detail = Union[fence_pb2.NotLeader, fence_pb2.LockHeld, fence_pb2.StaleToken, fence_pb2.RanRecently, fence_pb2.PermitsMismatch]
_TYPES: dict[str, type[message.Message]] = {
    "fence.v1.NotLeader": fence_pb2.NotLeader,
    "fence.v1.LockHeld": fence_pb2.LockHeld,
    "fence.v1.StaleToken": fence_pb2.StaleToken,
    "fence.v1.RanRecently": fence_pb2.RanRecently,
    "fence.v1.PermitsMismatch": fence_pb2.PermitsMismatch,
}


def _get(err: BaseException, method: str) -> Any:
    """err.method() if err has it (a grpc.Call does), else None."""
    f = getattr(err, method, None)
    return f() if callable(f) else None


def details(err: BaseException) -> list[Detail]:
    """The fence details of a failed call (unknown types are skipped)."""
    out: list[Detail] = []
    for key, value in _get(err, "trailing_metadata") or ():
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        st = Status.FromString(value)
        for d in st.details:
            cls = _TYPES.get(d.type_url.rsplit("/", 1)[-1])
            if cls is not None:
                out.append(cls.FromString(d.value))
    return out


def code(err: BaseException) -> grpc.StatusCode:
    c = _get(err, "code")
    return c if isinstance(c, grpc.StatusCode) else grpc.StatusCode.UNKNOWN


def message_of(err: BaseException) -> str:
    m = _get(err, "details")
    return m if isinstance(m, str) and m else code(err).name
