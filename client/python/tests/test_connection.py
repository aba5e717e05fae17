"""How the SDK reaches rescaled: mutual TLS against a real rescaled with
certificates made by openssl here, the server list (a server that does not
answer, and a follower that names the leader)."""
import socket
import subprocess

import grpc
import pytest

import rescale
from rescale import _connection
from rescale.v1 import rescale_pb2, rescale_pb2_grpc


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d):
    """A CA, rescaled's certificate for rescaled.test, and client
    certificates CN=admin/O=admin and CN=trainer/O=reporter."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=rescale test CA", cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:rescaled.test\n")
    for name, subject, ext in (("server", "/CN=rescaled.test", ["-extfile", "server.ext"]),
                               ("admin", "/CN=admin/O=admin", []),
                               ("trainer", "/CN=trainer/O=reporter", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", subject, cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *ext, cwd=d)


def test_mutual_tls(start_rescaled, tmp_path):
    make_pki(tmp_path)
    server = start_rescaled("--state=memory", f"--tls_cert_file={tmp_path / 'server.crt'}",
                            f"--tls_key_file={tmp_path / 'server.key'}",
                            f"--tls_client_ca_file={tmp_path / 'ca.crt'}")

    def connection(who):
        return rescale.Connection(servers=[server.address], ca_file=str(tmp_path / "ca.crt"),
                                  cert_file=str(tmp_path / f"{who}.crt"),
                                  key_file=str(tmp_path / f"{who}.key"),
                                  tls_server_name="rescaled.test")

    admin = connection("admin")
    rescale_pb2_grpc.JobServiceStub(admin.dial(server.address)).RegisterJob(
        rescale_pb2.RegisterJobRequest(spec=rescale_pb2.JobSpec(
            job_id="team-a/tls", min_replicas=1, max_replicas=2, local_batch_size=8)))
    env = {"RESCALE_JOB": "team-a/tls", **connection("trainer").environ(), "WORLD_SIZE": "1"}
    assert env["RESCALE_CA_FILE"].endswith("ca.crt")
    reporter = rescale.Reporter(pod="p", env=env)  # everything from the environment
    for step in range(5):
        reporter.record(step, 0.02)
    assert reporter.flush(timeout=30)
    assert reporter.stats().accepted == 5
    reporter.close()
    # The reporter role may send samples, not register jobs.
    with pytest.raises(grpc.RpcError) as refused:
        rescale_pb2_grpc.JobServiceStub(connection("trainer").dial(server.address)).RegisterJob(
            rescale_pb2.RegisterJobRequest(spec=rescale_pb2.JobSpec(
                job_id="team-a/x", min_replicas=1, max_replicas=1)), timeout=10)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # Without a client certificate the handshake fails: retried, never accepted.
    anonymous = rescale.Reporter("team-a/tls", pod="q", world_size=1, start=False,
                                 flush_interval=0, rpc_timeout=5,
                                 connection=rescale.Connection(
                                     servers=[server.address], ca_file=str(tmp_path / "ca.crt"),
                                     tls_server_name="rescaled.test"))
    anonymous.record(0, 0.02)
    assert anonymous.pump()
    assert (anonymous.stats().failed_rpcs, anonymous.stats().pending) == (1, 1)


def test_a_server_that_does_not_answer_is_skipped(rescaled):
    rescaled.register("team-a/list", local_batch_size=4)
    reporter = rescale.Reporter("team-a/list", server=f"127.0.0.1:{closed_port()},"
                                f"{rescaled.address}", pod="p", world_size=1, batch_size=4,
                                initial_backoff=0.01, flush_interval=0)
    for step in range(10):
        reporter.record(step, 0.02)
    assert reporter.flush(timeout=30)
    stats = reporter.stats()
    assert stats.failed_rpcs >= 1 and stats.accepted == 10
    reporter.close()


class FollowerRefusal(grpc.RpcError):
    def __init__(self, leader):
        self.leader = leader

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def trailing_metadata(self):
        return ((_connection.LEADER_METADATA_KEY, self.leader),)


def test_a_follower_names_the_leader_and_the_list_follows():
    servers = _connection.ServerList(rescale.Connection(servers=["a:1", "b:2"]))
    assert servers.current()[0] == "a:1"
    servers.after_failure("a:1", FollowerRefusal("b:2"))
    assert servers.current()[0] == "b:2"
    # A leader not in the list (a new replica) is added and followed.
    servers.after_failure("b:2", FollowerRefusal("c:3"))
    assert servers.current()[0] == "c:3"
    # A refusal for good is not a reason to move.
    class Invalid(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.INVALID_ARGUMENT
    servers.after_failure("c:3", Invalid())
    assert servers.current()[0] == "c:3"
    servers.close()
