// ServerList: the rescaled replicas a client was given (--server a,b,...)
// and which one it talks to now. With high availability only the leader
// takes changes and samples; a follower refuses them with UNAVAILABLE and
// names the leader in the trailing metadata "rescale-leader". Clients ask
// ServerList for the channel before each call and tell it how a failed
// call ended: it then follows the leader the answer named, or moves on to
// the next server when the call reached none. FindLeader asks every server
// (GetCluster) and settles on the one that leads.
//
// One server (no high availability) behaves as a plain channel.
//
// Thread safety: every method is thread-safe.
#ifndef RESCALE_CLIENT_COMMON_SERVER_LIST_H_
#define RESCALE_CLIENT_COMMON_SERVER_LIST_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "client/common/credentials.h"
#include "rescale/mutex.h"

namespace rescale::client {

// The trailing metadata key a follower names the leader in.
inline constexpr char kLeaderMetadataKey[] = "rescale-leader";

class ServerList {
 public:
  // `servers`: "host:port[,host:port...]". INVALID_ARGUMENT when empty.
  // Every channel is dialled through `connection` (credentials and token).
  static absl::StatusOr<std::shared_ptr<ServerList>> Create(absl::string_view servers,
                                                            RescaledConnection connection,
                                                            grpc::ChannelArguments args = {});
  static absl::StatusOr<std::shared_ptr<ServerList>> Create(
      absl::string_view servers, std::shared_ptr<grpc::ChannelCredentials> credentials,
      grpc::ChannelArguments args = {}) {
    return Create(servers, RescaledConnection::Of(std::move(credentials)), std::move(args));
  }
  // One channel made elsewhere (tests, a single server).
  static std::shared_ptr<ServerList> Of(std::shared_ptr<grpc::Channel> channel,
                                        std::string address = "");

  // The channel to call now, and its address.
  std::shared_ptr<grpc::Channel> Current();
  std::string CurrentAddress();
  size_t size() const { return servers_.size(); }

  // After a call on `channel` ended with `status` (its context is read for
  // the leader's address): true when the client should now use another
  // server (the leader named, or the next one when UNAVAILABLE named
  // none). A call on a channel that is no longer current changes nothing.
  bool AfterFailure(const std::shared_ptr<grpc::Channel>& channel, const grpc::Status& status,
                    const grpc::ClientContext& context);
  // Asks each server for GetCluster (at most `timeout` each) and makes the
  // leader current: the one that says it leads, else the one a follower
  // names, else the first that answered. True when it found a leader.
  bool FindLeader(absl::Duration timeout = absl::Seconds(2));

 private:
  ServerList() = default;
  std::shared_ptr<grpc::Channel> ChannelLocked(const std::string& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::vector<std::string> servers_;
  RescaledConnection connection_;
  grpc::ChannelArguments args_;
  Mutex mu_;
  std::string current_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rescale::client

#endif  // RESCALE_CLIENT_COMMON_SERVER_LIST_H_
