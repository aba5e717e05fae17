// ServerList: which rescaled replica to call, following the leader.
#include "client/common/server_list.h"

#include <grpcpp/create_channel.h>

#include <algorithm>

#include "absl/strings/str_split.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::client {

absl::StatusOr<std::shared_ptr<ServerList>> ServerList::Create(absl::string_view servers,
                                                               RescaledConnection connection,
                                                               grpc::ChannelArguments args) {
  std::shared_ptr<ServerList> list(new ServerList());
  for (absl::string_view server : absl::StrSplit(servers, ',', absl::SkipWhitespace())) {
    list->servers_.emplace_back(server);
  }
  if (list->servers_.empty()) {
    return absl::InvalidArgumentError("--server is empty: give host:port[,host:port...]");
  }
  for (const std::string& server : list->servers_) {
    if (absl::Status safe = connection.CheckTokenSafeFor(server); !safe.ok()) return safe;
  }
  list->connection_ = std::move(connection);
  list->args_ = std::move(args);
  {
    MutexLock lock(list->mu_);  // not shared yet; the analysis asks for it all the same
    list->current_ = list->servers_.front();
  }
  return list;
}

std::shared_ptr<ServerList> ServerList::Of(std::shared_ptr<grpc::Channel> channel,
                                           std::string address) {
  std::shared_ptr<ServerList> list(new ServerList());
  list->servers_ = {address};
  MutexLock lock(list->mu_);  // not shared yet; the analysis asks for it all the same
  list->current_ = address;
  list->channels_[address] = std::move(channel);
  return list;
}

std::shared_ptr<grpc::Channel> ServerList::ChannelLocked(const std::string& address) {
  std::shared_ptr<grpc::Channel>& channel = channels_[address];
  if (channel == nullptr) channel = connection_.Dial(address, args_);
  return channel;
}

std::shared_ptr<grpc::Channel> ServerList::Current() {
  MutexLock lock(mu_);
  return ChannelLocked(current_);
}

std::string ServerList::CurrentAddress() {
  MutexLock lock(mu_);
  return current_;
}

bool ServerList::AfterFailure(const std::shared_ptr<grpc::Channel>& channel,
                              const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE || servers_.size() < 2) return false;
  std::string leader;
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find(kLeaderMetadataKey); it != trailers.end()) {
    leader.assign(it->second.data(), it->second.size());
  }
  MutexLock lock(mu_);
  if (ChannelLocked(current_) != channel) return false;  // someone moved on already
  if (!leader.empty()) {
    if (leader == current_) return false;
    current_ = leader;
    return true;
  }
  // Nobody named: the server is down, or without a leader to name; the
  // next one may know better.
  auto it = std::find(servers_.begin(), servers_.end(), current_);
  current_ =
      it == servers_.end() || std::next(it) == servers_.end() ? servers_.front() : *std::next(it);
  return true;
}

bool ServerList::FindLeader(absl::Duration timeout) {
  if (servers_.size() < 2) return true;
  std::string named;
  std::string answered;
  for (const std::string& server : servers_) {
    std::shared_ptr<grpc::Channel> channel;
    {
      MutexLock lock(mu_);
      channel = ChannelLocked(server);
    }
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    v1::Cluster cluster;
    if (!v1::ClusterService::NewStub(channel)
             ->GetCluster(&context, v1::GetClusterRequest(), &cluster)
             .ok()) {
      continue;
    }
    if (cluster.leading()) {
      MutexLock lock(mu_);
      current_ = server;
      return true;
    }
    if (answered.empty()) answered = server;
    if (named.empty()) named = cluster.leader();
  }
  MutexLock lock(mu_);
  if (!named.empty()) {
    current_ = named;
    return true;
  }
  if (!answered.empty()) current_ = answered;
  return false;
}

}  // namespace rescale::client
