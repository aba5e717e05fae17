// EtcdClient: the calls rescaled makes on etcd's v3 gRPC API (KV, Lease,
// Watch, Election), over the stubs generated from the .proto files Debian
// ships with etcd (see CMakeLists.txt), and ParseEtcdSpec for --state's
// etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
//
// One channel per member. A call that finds its member unreachable, or
// without quorum (UNAVAILABLE, DEADLINE_EXCEEDED), is tried on the next
// member, each at most once; the member that answered is used first from
// then on. Every call has a deadline (`call_timeout`): etcd answers a
// request it cannot commit for lack of quorum only after its own timeout.
//
// Thread safety: every method is thread-safe.
#ifndef RESCALE_SERVER_ETCD_ETCD_CLIENT_H_
#define RESCALE_SERVER_ETCD_ETCD_CLIENT_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/api/v3election/v3electionpb/v3election.grpc.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace rescale::server {

struct EtcdSpec {
  std::vector<std::string> endpoints;  // host:port
  std::string prefix;                  // "/rescale", no trailing slash
};

// Parses "etcd://HOST:PORT[,HOST:PORT...]/PREFIX". INVALID_ARGUMENT naming
// the part that is wrong.
absl::StatusOr<EtcdSpec> ParseEtcdSpec(absl::string_view spec);

// The end of the key range of every key starting with `prefix` (etcd's
// "range_end": the prefix with its last byte incremented).
std::string PrefixEnd(absl::string_view prefix);

class EtcdClient {
 public:
  explicit EtcdClient(std::vector<std::string> endpoints,
                      absl::Duration call_timeout = absl::Seconds(3));

  const std::vector<std::string>& endpoints() const { return endpoints_; }

  absl::StatusOr<etcdserverpb::RangeResponse> Range(const etcdserverpb::RangeRequest& request);
  absl::StatusOr<etcdserverpb::TxnResponse> Txn(const etcdserverpb::TxnRequest& request);
  // A lease of `ttl` (whole seconds, at least 1).
  absl::StatusOr<int64_t> LeaseGrant(absl::Duration ttl);
  absl::Status LeaseRevoke(int64_t lease);
  // Renews the lease once, trying each member for at most `timeout`; its
  // remaining TTL, 0 when it has expired.
  absl::StatusOr<absl::Duration> LeaseKeepAliveOnce(int64_t lease, absl::Duration timeout);

  // Blocks until this client's `value` leads election `name` on `lease`,
  // the lease ends, or `context` is cancelled (TryCancel from another
  // thread). No deadline and no retry on another member: the caller
  // campaigns again.
  absl::StatusOr<v3electionpb::LeaderKey> Campaign(const std::string& name, int64_t lease,
                                                    const std::string& value,
                                                    grpc::ClientContext* context);
  // The value of the current leader of `name`; NOT_FOUND when none.
  absl::StatusOr<std::string> Leader(const std::string& name);
  absl::Status Resign(const v3electionpb::LeaderKey& leader);

  // A watch stream on the member in use (the caller reads it, and
  // reconnects through this method after an error).
  std::shared_ptr<grpc::Channel> CurrentChannel();

 private:
  // Runs `call` on the member in use, then on each other once while the
  // answer says the member is unreachable or without quorum.
  struct Member {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<v3electionpb::Election::Stub> election;
  };
  absl::Status OnSomeMember(const std::function<grpc::Status(Member&, grpc::ClientContext&)>& call,
                            std::optional<absl::Duration> timeout = std::nullopt);

  std::vector<std::string> endpoints_;
  std::vector<Member> members_;
  absl::Duration call_timeout_;
  std::atomic<size_t> current_{0};
};

// gRPC's status as an absl::Status, with `what` in front of the message.
absl::Status FromGrpc(const grpc::Status& status, absl::string_view what);

}  // namespace rescale::server

#endif  // RESCALE_SERVER_ETCD_ETCD_CLIENT_H_
