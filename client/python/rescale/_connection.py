"""How the SDK reaches rescaled: the server list (high availability), TLS,
mutual TLS and the bearer token, with the same rules and environment
variables as Rescale's other clients (client/common/credentials.h):

  RESCALE_SERVER        host:port[,host:port...]  (every replica with HA)
  RESCALE_TLS           1/true: TLS with the system's root CAs
  RESCALE_CA_FILE       trust this CA (implies TLS)
  RESCALE_CERT_FILE     client certificate chain, PEM (mutual TLS)
  RESCALE_KEY_FILE      its key, PEM
  RESCALE_TLS_SERVER_NAME  the name the server's certificate must carry
  RESCALE_TOKEN_FILE    a file holding the token, read again when it changes
  RESCALE_TOKEN         the token itself (when no token file)

TLS when asked for, or a CA file or client certificate is given; plaintext
otherwise. A token goes with every call as `authorization: Bearer TOKEN`,
added by a client interceptor (gRPC's call credentials refuse plaintext
channels, and a loopback rescaled with a token but no TLS is a configuration
users run).

With several servers only the leader takes samples and changes: a follower
refuses with UNAVAILABLE and names the leader in the trailing metadata
`rescale-leader`. ServerList follows that name, or moves to the next server
when a call reached none.
"""
from __future__ import annotations

import dataclasses
import os
import threading
from typing import Callable, Mapping, Optional, Sequence

import grpc

LEADER_METADATA_KEY = "rescale-leader"
DEFAULT_SERVER = "localhost:50051"


def _truthy(value: Optional[str]) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


@dataclasses.dataclass
class Connection:
    """Where rescaled is and how to prove who we are."""

    servers: Sequence[str] = (DEFAULT_SERVER,)
    tls: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    tls_server_name: str = ""
    token: str = ""
    token_file: str = ""

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None, server: Optional[str] = None,
                 **overrides) -> "Connection":
        env = os.environ if env is None else env
        servers = server if server is not None else env.get("RESCALE_SERVER", DEFAULT_SERVER)
        out = cls(
            servers=parse_servers(servers),
            tls=_truthy(env.get("RESCALE_TLS")),
            ca_file=env.get("RESCALE_CA_FILE", ""),
            cert_file=env.get("RESCALE_CERT_FILE", ""),
            key_file=env.get("RESCALE_KEY_FILE", ""),
            tls_server_name=env.get("RESCALE_TLS_SERVER_NAME", ""),
            token=env.get("RESCALE_TOKEN", ""),
            token_file=env.get("RESCALE_TOKEN_FILE", ""),
        )
        for name, value in overrides.items():
            if value is not None:
                setattr(out, name, value)
        out.validate()
        return out

    def validate(self) -> None:
        if not self.servers:
            raise ValueError("server: at least one host:port is needed")
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file: give both for mutual TLS, or neither")

    def uses_tls(self) -> bool:
        return self.tls or bool(self.ca_file) or bool(self.cert_file)

    def environ(self) -> dict:
        """The environment variables that reproduce this connection (what
        rescale-launch hands its workers)."""
        out = {"RESCALE_SERVER": ",".join(self.servers)}
        if self.tls:
            out["RESCALE_TLS"] = "1"
        for name, key in (("ca_file", "RESCALE_CA_FILE"), ("cert_file", "RESCALE_CERT_FILE"),
                          ("key_file", "RESCALE_KEY_FILE"), ("token_file", "RESCALE_TOKEN_FILE"),
                          ("tls_server_name", "RESCALE_TLS_SERVER_NAME"), ("token", "RESCALE_TOKEN")):
            if getattr(self, name):
                out[key] = getattr(self, name)
        return out

    def dial(self, address: str) -> grpc.Channel:
        options = [("grpc.enable_retries", 0)]
        if self.tls_server_name:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        if self.uses_tls():
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(self.ca_file),
                private_key=_read(self.key_file),
                certificate_chain=_read(self.cert_file))
            channel = grpc.secure_channel(address, credentials, options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        if self.token or self.token_file:
            channel = grpc.intercept_channel(channel, _TokenInterceptor(BearerToken(
                self.token, self.token_file)))
        return channel


def parse_servers(servers: str) -> list:
    out = [s.strip() for s in servers.split(",") if s.strip()]
    if not out:
        raise ValueError(f"server: {servers!r} names no host:port")
    return out


def _read(path: str) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


class BearerToken:
    """A fixed token, or a file's trimmed content read again (at most once a
    second) when its modification time or size changed, so a rotated Secret
    is picked up without a restart. When a new read fails the last token
    stays."""

    def __init__(self, token: str = "", path: str = "",
                 clock: Callable[[], float] = None):
        import time
        self._token = token.strip()
        self._path = path
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._checked = float("-inf")
        self._stamp = None  # guarded by _lock

    def get(self) -> str:
        if not self._path:
            return self._token
        with self._lock:
            now = self._clock()
            if now - self._checked < 1.0 and self._stamp is not None:
                return self._token
            self._checked = now
            try:
                st = os.stat(self._path)
                stamp = (st.st_mtime_ns, st.st_size)
                if stamp != self._stamp:
                    with open(self._path, encoding="utf-8") as f:
                        self._token = f.read().strip()
                    self._stamp = stamp
            except OSError:
                pass
            return self._token


class _TokenInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def __init__(self, token: BearerToken):
        self._token = token

    def _with_token(self, details):
        token = self._token.get()
        if not token:
            return details
        metadata = list(details.metadata or []) + [("authorization", f"Bearer {token}")]
        return _CallDetails(details.method, details.timeout, metadata, details.credentials,
                            getattr(details, "wait_for_ready", None),
                            getattr(details, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(self._with_token(details), request)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression):
        self.method = method
        self.timeout = timeout
        self.metadata = metadata
        self.credentials = credentials
        self.wait_for_ready = wait_for_ready
        self.compression = compression


class Backoff:
    """The retry schedule of every Rescale client (client/common/backoff.h):
    after the n-th consecutive failure wait initial x 2^(n-1), at most
    `maximum`, with equal jitter (a uniformly random delay in [d/2, d]) so
    clients that failed together do not retry together. Not thread-safe:
    its owner guards it."""

    def __init__(self, initial: float, maximum: float,
                 uniform01: Optional[Callable[[], float]] = None):
        import random
        self.initial, self.maximum = initial, maximum
        self._uniform01 = uniform01 or random.random
        self.failures = 0

    def next_delay(self) -> float:
        """Counts a failure; the delay before the next attempt."""
        self.failures += 1
        delay = min(self.maximum, self.initial * 2 ** min(self.failures - 1, 30))
        return delay * (0.5 + 0.5 * self._uniform01())

    def reset(self) -> None:
        self.failures = 0


class ServerList:
    """The replicas a client was given and the one it talks to now. Thread-safe."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._lock = threading.Lock()
        self._servers = list(connection.servers)  # guarded by _lock
        self._current = 0  # guarded by _lock
        self._channels = {}  # address -> channel; guarded by _lock

    def current(self) -> tuple:
        """(address, channel) to call now."""
        with self._lock:
            address = self._servers[self._current]
            channel = self._channels.get(address)
        if channel is None:
            # Dialling reads certificate files: outside the lock.
            channel = self._connection.dial(address)
            with self._lock:
                channel = self._channels.setdefault(address, channel)
        return address, channel

    def after_failure(self, address: str, error: grpc.RpcError) -> None:
        """A call to `address` failed with `error`: follow the leader it named,
        or move on to the next server when it reached none."""
        code = error.code() if hasattr(error, "code") else None
        if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return
        leader = ""
        try:
            for key, value in error.trailing_metadata() or ():
                if key == LEADER_METADATA_KEY:
                    leader = value
        except Exception:  # a locally made error has no metadata
            leader = ""
        with self._lock:
            if self._servers[self._current] != address:
                return  # another thread moved on already
            if leader:
                if leader not in self._servers:
                    self._servers.append(leader)
                self._current = self._servers.index(leader)
            elif len(self._servers) > 1:
                self._current = (self._current + 1) % len(self._servers)

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            channel.close()
