from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
ROLE_FOLLOWER: Role
ROLE_LEADER: Role
ROLE_UNSPECIFIED: Role
SUFFRAGE_LEARNER: Suffrage
SUFFRAGE_UNSPECIFIED: Suffrage
SUFFRAGE_VOTER: Suffrage

class AcquireRequest(_message.Message):
    __slots__ = ["ack", "lease_secret", "lock_delay", "name", "once_per", "open", "permits", "release_token", "request_id", "seq", "shared", "wait"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ONCE_PER_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    ack: int
    lease_secret: bytes
    lock_delay: _duration_pb2.Duration
    name: str
    once_per: _duration_pb2.Duration
    open: _containers.RepeatedScalarFieldContainer[int]
    permits: int
    release_token: int
    request_id: bytes
    seq: int
    shared: bool
    wait: bool
    def __init__(self, request_id: _Optional[bytes] = ..., lease_secret: _Optional[bytes] = ..., name: _Optional[str] = ..., wait: bool = ..., lock_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., seq: _Optional[int] = ..., ack: _Optional[int] = ..., open: _Optional[_Iterable[int]] = ..., once_per: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., permits: _Optional[int] = ..., shared: bool = ..., release_token: _Optional[int] = ...) -> None: ...

class AcquireResponse(_message.Message):
    __slots__ = ["lease_number", "name", "shared", "signed_token", "slot", "token"]
    LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    SIGNED_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    lease_number: int
    name: str
    shared: bool
    signed_token: str
    slot: int
    token: int
    def __init__(self, name: _Optional[str] = ..., token: _Optional[int] = ..., lease_number: _Optional[int] = ..., signed_token: _Optional[str] = ..., slot: _Optional[int] = ..., shared: bool = ...) -> None: ...

class AddMemberRequest(_message.Message):
    __slots__ = ["id", "raft_addr"]
    ID_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    id: str
    raft_addr: str
    def __init__(self, id: _Optional[str] = ..., raft_addr: _Optional[str] = ...) -> None: ...

class AddMemberResponse(_message.Message):
    __slots__ = ["cluster_id", "members"]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, cluster_id: _Optional[int] = ..., members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ...) -> None: ...

class BackupHeader(_message.Message):
    __slots__ = ["cluster_id", "index", "leases", "locks", "node_id", "sha256", "size", "taken_at", "term", "token", "version"]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LEASES_FIELD_NUMBER: _ClassVar[int]
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TAKEN_AT_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    index: int
    leases: int
    locks: int
    node_id: str
    sha256: bytes
    size: int
    taken_at: _timestamp_pb2.Timestamp
    term: int
    token: int
    version: str
    def __init__(self, cluster_id: _Optional[int] = ..., node_id: _Optional[str] = ..., index: _Optional[int] = ..., term: _Optional[int] = ..., taken_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., token: _Optional[int] = ..., leases: _Optional[int] = ..., locks: _Optional[int] = ..., size: _Optional[int] = ..., sha256: _Optional[bytes] = ..., version: _Optional[str] = ...) -> None: ...

class BackupRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class BackupResponse(_message.Message):
    __slots__ = ["data", "header"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    header: BackupHeader
    def __init__(self, header: _Optional[_Union[BackupHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class CreateLeaseRequest(_message.Message):
    __slots__ = ["owner", "request_id", "ttl"]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    owner: str
    request_id: bytes
    ttl: _duration_pb2.Duration
    def __init__(self, request_id: _Optional[bytes] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., owner: _Optional[str] = ...) -> None: ...

class CreateLeaseResponse(_message.Message):
    __slots__ = ["lease_number", "lease_secret", "ttl"]
    LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    lease_number: int
    lease_secret: bytes
    ttl: _duration_pb2.Duration
    def __init__(self, lease_secret: _Optional[bytes] = ..., lease_number: _Optional[int] = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ForceReleaseRequest(_message.Message):
    __slots__ = ["name", "reason", "request_id", "token"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    reason: str
    request_id: bytes
    token: int
    def __init__(self, name: _Optional[str] = ..., reason: _Optional[str] = ..., request_id: _Optional[bytes] = ..., token: _Optional[int] = ...) -> None: ...

class ForceReleaseResponse(_message.Message):
    __slots__ = ["released", "revoked_lease_number", "revoked_owner"]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    REVOKED_LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    REVOKED_OWNER_FIELD_NUMBER: _ClassVar[int]
    released: _containers.RepeatedScalarFieldContainer[str]
    revoked_lease_number: int
    revoked_owner: str
    def __init__(self, revoked_lease_number: _Optional[int] = ..., revoked_owner: _Optional[str] = ..., released: _Optional[_Iterable[str]] = ...) -> None: ...

class GetLockRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetLockResponse(_message.Message):
    __slots__ = ["index", "lock", "queue"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LOCK_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    index: int
    lock: LockInfo
    queue: _containers.RepeatedCompositeFieldContainer[Waiter]
    def __init__(self, lock: _Optional[_Union[LockInfo, _Mapping]] = ..., index: _Optional[int] = ..., queue: _Optional[_Iterable[_Union[Waiter, _Mapping]]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ["key"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    key: str
    def __init__(self, key: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ["token", "value"]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    token: int
    value: bytes
    def __init__(self, value: _Optional[bytes] = ..., token: _Optional[int] = ...) -> None: ...

class GrantEnded(_message.Message):
    __slots__ = ["name", "token"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    token: int
    def __init__(self, name: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class HotLock(_message.Message):
    __slots__ = ["expirations", "grants", "name", "score", "score_error", "wait_seconds", "waiters", "waits"]
    EXPIRATIONS_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCORE_ERROR_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    WAITS_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    expirations: float
    grants: float
    name: str
    score: float
    score_error: float
    wait_seconds: float
    waiters: int
    waits: float
    def __init__(self, name: _Optional[str] = ..., score: _Optional[float] = ..., score_error: _Optional[float] = ..., grants: _Optional[float] = ..., waits: _Optional[float] = ..., wait_seconds: _Optional[float] = ..., expirations: _Optional[float] = ..., waiters: _Optional[int] = ...) -> None: ...

class HotLocksRequest(_message.Message):
    __slots__ = ["limit", "prefix"]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    limit: int
    prefix: str
    def __init__(self, limit: _Optional[int] = ..., prefix: _Optional[str] = ...) -> None: ...

class HotLocksResponse(_message.Message):
    __slots__ = ["index", "locks", "window"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    index: int
    locks: _containers.RepeatedCompositeFieldContainer[HotLock]
    window: _duration_pb2.Duration
    def __init__(self, locks: _Optional[_Iterable[_Union[HotLock, _Mapping]]] = ..., window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

class KeepAliveRequest(_message.Message):
    __slots__ = ["lease_secret", "seq"]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    lease_secret: bytes
    seq: int
    def __init__(self, lease_secret: _Optional[bytes] = ..., seq: _Optional[int] = ...) -> None: ...

class KeepAliveResponse(_message.Message):
    __slots__ = ["error", "held_tokens", "ok", "seq", "ttl"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HELD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    error: str
    held_tokens: _containers.RepeatedScalarFieldContainer[int]
    ok: bool
    seq: int
    ttl: _duration_pb2.Duration
    def __init__(self, seq: _Optional[int] = ..., ok: bool = ..., ttl: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., held_tokens: _Optional[_Iterable[int]] = ..., error: _Optional[str] = ...) -> None: ...

class ListLocksRequest(_message.Message):
    __slots__ = ["after", "limit"]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    after: str
    limit: int
    def __init__(self, after: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListLocksResponse(_message.Message):
    __slots__ = ["index", "locks", "more"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    index: int
    locks: _containers.RepeatedCompositeFieldContainer[LockInfo]
    more: bool
    def __init__(self, locks: _Optional[_Iterable[_Union[LockInfo, _Mapping]]] = ..., more: bool = ..., index: _Optional[int] = ...) -> None: ...

class LockEvent(_message.Message):
    __slots__ = ["cause", "lease_number", "lock_delay", "name", "owner", "shared", "slot", "token", "type", "value"]
    class Cause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    class Type(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    CAUSE_CANCELLED: LockEvent.Cause
    CAUSE_EXPIRED: LockEvent.Cause
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FORCE_RELEASED: LockEvent.Cause
    CAUSE_RELEASED: LockEvent.Cause
    CAUSE_REVOKED: LockEvent.Cause
    CAUSE_UNSPECIFIED: LockEvent.Cause
    LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_GRANTED: LockEvent.Type
    TYPE_LOCK_DELAY_ENDED: LockEvent.Type
    TYPE_LOCK_DELAY_STARTED: LockEvent.Type
    TYPE_RELEASED: LockEvent.Type
    TYPE_UNSPECIFIED: LockEvent.Type
    TYPE_WAITER_JOINED: LockEvent.Type
    TYPE_WAITER_LEFT: LockEvent.Type
    TYPE_WRITTEN: LockEvent.Type
    VALUE_FIELD_NUMBER: _ClassVar[int]
    cause: LockEvent.Cause
    lease_number: int
    lock_delay: _duration_pb2.Duration
    name: str
    owner: str
    shared: bool
    slot: int
    token: int
    type: LockEvent.Type
    value: bytes
    def __init__(self, type: _Optional[_Union[LockEvent.Type, str]] = ..., name: _Optional[str] = ..., lease_number: _Optional[int] = ..., owner: _Optional[str] = ..., token: _Optional[int] = ..., cause: _Optional[_Union[LockEvent.Cause, str]] = ..., lock_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., value: _Optional[bytes] = ..., slot: _Optional[int] = ..., shared: bool = ...) -> None: ...

class LockGrant(_message.Message):
    __slots__ = ["delay_left", "delayed", "held_for", "lease_number", "lock_delay", "owner", "shared", "slot", "token", "ttl_left"]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEFT_FIELD_NUMBER: _ClassVar[int]
    HELD_FOR_FIELD_NUMBER: _ClassVar[int]
    LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_LEFT_FIELD_NUMBER: _ClassVar[int]
    delay_left: _duration_pb2.Duration
    delayed: bool
    held_for: _duration_pb2.Duration
    lease_number: int
    lock_delay: _duration_pb2.Duration
    owner: str
    shared: bool
    slot: int
    token: int
    ttl_left: _duration_pb2.Duration
    def __init__(self, lease_number: _Optional[int] = ..., owner: _Optional[str] = ..., token: _Optional[int] = ..., slot: _Optional[int] = ..., shared: bool = ..., delayed: bool = ..., ttl_left: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., lock_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., delay_left: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., held_for: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LockHeld(_message.Message):
    __slots__ = ["delayed", "holder_lease_number", "holder_owner", "name", "token"]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    HOLDER_LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    HOLDER_OWNER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    delayed: bool
    holder_lease_number: int
    holder_owner: str
    name: str
    token: int
    def __init__(self, name: _Optional[str] = ..., holder_lease_number: _Optional[int] = ..., holder_owner: _Optional[str] = ..., token: _Optional[int] = ..., delayed: bool = ...) -> None: ...

class LockInfo(_message.Message):
    __slots__ = ["delay_left", "delayed", "grants", "held_for", "holder_lease_number", "holder_owner", "lock_delay", "name", "permits", "shared_waiters", "token", "ttl_left", "waiters"]
    DELAYED_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEFT_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    HELD_FOR_FIELD_NUMBER: _ClassVar[int]
    HOLDER_LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    HOLDER_OWNER_FIELD_NUMBER: _ClassVar[int]
    LOCK_DELAY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    SHARED_WAITERS_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    TTL_LEFT_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    delay_left: _duration_pb2.Duration
    delayed: bool
    grants: _containers.RepeatedCompositeFieldContainer[LockGrant]
    held_for: _duration_pb2.Duration
    holder_lease_number: int
    holder_owner: str
    lock_delay: _duration_pb2.Duration
    name: str
    permits: int
    shared_waiters: int
    token: int
    ttl_left: _duration_pb2.Duration
    waiters: int
    def __init__(self, name: _Optional[str] = ..., holder_lease_number: _Optional[int] = ..., holder_owner: _Optional[str] = ..., token: _Optional[int] = ..., ttl_left: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., waiters: _Optional[int] = ..., delayed: bool = ..., lock_delay: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., delay_left: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., permits: _Optional[int] = ..., grants: _Optional[_Iterable[_Union[LockGrant, _Mapping]]] = ..., shared_waiters: _Optional[int] = ..., held_for: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ["active", "grpc_addr", "id", "lag", "last_contact_ms", "match_index", "raft_addr", "role", "suffrage"]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    GRPC_ADDR_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    LAST_CONTACT_MS_FIELD_NUMBER: _ClassVar[int]
    MATCH_INDEX_FIELD_NUMBER: _ClassVar[int]
    RAFT_ADDR_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    SUFFRAGE_FIELD_NUMBER: _ClassVar[int]
    active: bool
    grpc_addr: str
    id: str
    lag: int
    last_contact_ms: int
    match_index: int
    raft_addr: str
    role: Role
    suffrage: Suffrage
    def __init__(self, id: _Optional[str] = ..., raft_addr: _Optional[str] = ..., grpc_addr: _Optional[str] = ..., role: _Optional[_Union[Role, str]] = ..., suffrage: _Optional[_Union[Suffrage, str]] = ..., match_index: _Optional[int] = ..., lag: _Optional[int] = ..., active: bool = ..., last_contact_ms: _Optional[int] = ...) -> None: ...

class MembersRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class MembersResponse(_message.Message):
    __slots__ = ["answered_by", "members"]
    ANSWERED_BY_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    answered_by: str
    members: _containers.RepeatedCompositeFieldContainer[Member]
    def __init__(self, members: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., answered_by: _Optional[str] = ...) -> None: ...

class NotLeader(_message.Message):
    __slots__ = ["leader_addr", "leader_id"]
    LEADER_ADDR_FIELD_NUMBER: _ClassVar[int]
    LEADER_ID_FIELD_NUMBER: _ClassVar[int]
    leader_addr: str
    leader_id: str
    def __init__(self, leader_id: _Optional[str] = ..., leader_addr: _Optional[str] = ...) -> None: ...

class PermitsMismatch(_message.Message):
    __slots__ = ["asked", "name", "permits"]
    ASKED_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PERMITS_FIELD_NUMBER: _ClassVar[int]
    asked: int
    name: str
    permits: int
    def __init__(self, name: _Optional[str] = ..., permits: _Optional[int] = ..., asked: _Optional[int] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ["key", "request_id", "token", "value"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    request_id: bytes
    token: int
    value: bytes
    def __init__(self, request_id: _Optional[bytes] = ..., key: _Optional[str] = ..., value: _Optional[bytes] = ..., token: _Optional[int] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RanRecently(_message.Message):
    __slots__ = ["ago", "finished_at", "lease_number", "name", "owner", "token", "window"]
    AGO_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    ago: _duration_pb2.Duration
    finished_at: _timestamp_pb2.Timestamp
    lease_number: int
    name: str
    owner: str
    token: int
    window: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., token: _Optional[int] = ..., lease_number: _Optional[int] = ..., owner: _Optional[str] = ..., finished_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., ago: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ["ack", "lease_secret", "name", "open", "record_run", "request_id", "seq"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPEN_FIELD_NUMBER: _ClassVar[int]
    RECORD_RUN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    ack: int
    lease_secret: bytes
    name: str
    open: _containers.RepeatedScalarFieldContainer[int]
    record_run: bool
    request_id: bytes
    seq: int
    def __init__(self, request_id: _Optional[bytes] = ..., lease_secret: _Optional[bytes] = ..., name: _Optional[str] = ..., seq: _Optional[int] = ..., ack: _Optional[int] = ..., open: _Optional[_Iterable[int]] = ..., record_run: bool = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RemoveMemberRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class RemoveMemberResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class RevokeRequest(_message.Message):
    __slots__ = ["lease_secret", "request_id"]
    LEASE_SECRET_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    lease_secret: bytes
    request_id: bytes
    def __init__(self, request_id: _Optional[bytes] = ..., lease_secret: _Optional[bytes] = ...) -> None: ...

class RevokeResponse(_message.Message):
    __slots__ = ["released"]
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, released: _Optional[_Iterable[str]] = ...) -> None: ...

class SessionCancel(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ["acquire", "call_id", "cancel", "keep_alive", "release", "timeout", "traceparent"]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    acquire: AcquireRequest
    call_id: int
    cancel: SessionCancel
    keep_alive: KeepAliveRequest
    release: ReleaseRequest
    timeout: _duration_pb2.Duration
    traceparent: str
    def __init__(self, call_id: _Optional[int] = ..., timeout: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., traceparent: _Optional[str] = ..., acquire: _Optional[_Union[AcquireRequest, _Mapping]] = ..., release: _Optional[_Union[ReleaseRequest, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAliveRequest, _Mapping]] = ..., cancel: _Optional[_Union[SessionCancel, _Mapping]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ["acquire", "call_id", "error", "keep_alive", "release"]
    ACQUIRE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALIVE_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    acquire: AcquireResponse
    call_id: int
    error: bytes
    keep_alive: KeepAliveResponse
    release: ReleaseResponse
    def __init__(self, call_id: _Optional[int] = ..., acquire: _Optional[_Union[AcquireResponse, _Mapping]] = ..., release: _Optional[_Union[ReleaseResponse, _Mapping]] = ..., keep_alive: _Optional[_Union[KeepAliveResponse, _Mapping]] = ..., error: _Optional[bytes] = ...) -> None: ...

class StaleToken(_message.Message):
    __slots__ = ["highest", "key", "offered"]
    HIGHEST_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OFFERED_FIELD_NUMBER: _ClassVar[int]
    highest: int
    key: str
    offered: int
    def __init__(self, key: _Optional[str] = ..., offered: _Optional[int] = ..., highest: _Optional[int] = ...) -> None: ...

class TransferLeaderRequest(_message.Message):
    __slots__ = ["id"]
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class TransferLeaderResponse(_message.Message):
    __slots__ = ["leader"]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    leader: str
    def __init__(self, leader: _Optional[str] = ...) -> None: ...

class Waiter(_message.Message):
    __slots__ = ["lease_number", "owner", "shared"]
    LEASE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    lease_number: int
    owner: str
    shared: bool
    def __init__(self, lease_number: _Optional[int] = ..., owner: _Optional[str] = ..., shared: bool = ...) -> None: ...

class WatchCompacted(_message.Message):
    __slots__ = ["from_index", "oldest_index"]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    OLDEST_INDEX_FIELD_NUMBER: _ClassVar[int]
    from_index: int
    oldest_index: int
    def __init__(self, from_index: _Optional[int] = ..., oldest_index: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ["from_index", "name", "prefix"]
    FROM_INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    from_index: int
    name: str
    prefix: bool
    def __init__(self, name: _Optional[str] = ..., prefix: bool = ..., from_index: _Optional[int] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ["events", "index"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[LockEvent]
    index: int
    def __init__(self, index: _Optional[int] = ..., events: _Optional[_Iterable[_Union[LockEvent, _Mapping]]] = ...) -> None: ...

class Suffrage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
