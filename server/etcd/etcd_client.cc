// EtcdClient: etcd v3 calls with a deadline each, tried member by member.
#include "server/etcd/etcd_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace rescale::server {

absl::StatusOr<EtcdSpec> ParseEtcdSpec(absl::string_view spec) {
  constexpr absl::string_view kScheme = "etcd://";
  if (!absl::StartsWith(spec, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", spec, "\" does not start with etcd://"));
  }
  absl::string_view rest = spec.substr(kScheme.size());
  const size_t slash = rest.find('/');
  if (slash == absl::string_view::npos || slash + 1 == rest.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", spec, "\" has no key prefix: etcd://HOST:PORT[,HOST:PORT...]/PREFIX"));
  }
  EtcdSpec parsed;
  absl::string_view prefix = rest.substr(slash);
  while (prefix.size() > 1 && prefix.back() == '/') prefix.remove_suffix(1);
  parsed.prefix = std::string(prefix);
  for (absl::string_view endpoint : absl::StrSplit(rest.substr(0, slash), ',')) {
    const size_t colon = endpoint.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "etcd endpoint \"", endpoint, "\" in \"", spec, "\" is not HOST:PORT"));
    }
    parsed.endpoints.emplace_back(endpoint);
  }
  return parsed;
}

std::string PrefixEnd(absl::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(end.back() + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, absl::Duration call_timeout)
    : endpoints_(std::move(endpoints)), call_timeout_(call_timeout) {
  for (const std::string& endpoint : endpoints_) {
    Member member;
    // Keepalive pings find a member that stopped answering (paused, cut
    // off) under a long-lived call (a campaign, a watch); etcd accepts
    // pings every 5 s (--grpc-keepalive-min-time).
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 3000);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    member.channel =
        grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args);
    member.kv = etcdserverpb::KV::NewStub(member.channel);
    member.lease = etcdserverpb::Lease::NewStub(member.channel);
    member.election = v3electionpb::Election::NewStub(member.channel);
    members_.push_back(std::move(member));
  }
}

std::shared_ptr<grpc::Channel> EtcdClient::CurrentChannel() {
  return members_[current_.load(std::memory_order_relaxed) % members_.size()].channel;
}

absl::Status EtcdClient::OnSomeMember(
    const std::function<grpc::Status(Member&, grpc::ClientContext&)>& call,
    std::optional<absl::Duration> timeout) {
  const size_t first = current_.load(std::memory_order_relaxed);
  grpc::Status last;
  for (size_t attempt = 0; attempt < members_.size(); ++attempt) {
    const size_t index = (first + attempt) % members_.size();
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout.value_or(call_timeout_)));
    last = call(members_[index], context);
    const bool member_down = last.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             last.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!member_down) {
      current_.store(index, std::memory_order_relaxed);
      break;
    }
    last = grpc::Status(last.error_code(),
                        absl::StrCat("etcd ", endpoints_[index], ": ", last.error_message()));
  }
  return FromGrpc(last, "etcd");
}

absl::StatusOr<etcdserverpb::RangeResponse> EtcdClient::Range(
    const etcdserverpb::RangeRequest& request) {
  etcdserverpb::RangeResponse response;
  absl::Status status = OnSomeMember([&](Member& member, grpc::ClientContext& context) {
    response.Clear();
    return member.kv->Range(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<etcdserverpb::TxnResponse> EtcdClient::Txn(const etcdserverpb::TxnRequest& request) {
  etcdserverpb::TxnResponse response;
  absl::Status status = OnSomeMember([&](Member& member, grpc::ClientContext& context) {
    response.Clear();
    return member.kv->Txn(&context, request, &response);
  });
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<int64_t> EtcdClient::LeaseGrant(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse response;
  absl::Status status = OnSomeMember([&](Member& member, grpc::ClientContext& context) {
    return member.lease->LeaseGrant(&context, request, &response);
  });
  if (!status.ok()) return status;
  if (!response.error().empty()) return absl::UnavailableError("etcd lease: " + response.error());
  return response.id();
}

absl::Status EtcdClient::LeaseRevoke(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return OnSomeMember([&](Member& member, grpc::ClientContext& context) {
    return member.lease->LeaseRevoke(&context, request, &response);
  });
}

absl::StatusOr<absl::Duration> EtcdClient::LeaseKeepAliveOnce(int64_t lease,
                                                               absl::Duration timeout) {
  etcdserverpb::LeaseKeepAliveResponse response;
  bool answered = false;
  absl::Status status = OnSomeMember([&](Member& member, grpc::ClientContext& context) {
    auto stream = member.lease->LeaseKeepAlive(&context);
    etcdserverpb::LeaseKeepAliveRequest request;
    request.set_id(lease);
    answered = stream->Write(request) && stream->Read(&response);
    stream->WritesDone();
    if (answered) context.TryCancel();  // one renewal is all this call wants
    grpc::Status finished = stream->Finish();
    return answered ? grpc::Status::OK : finished;
  }, timeout);
  if (!status.ok()) return status;
  if (!answered) return absl::UnavailableError("etcd: the lease keep-alive stream closed");
  return absl::Seconds(response.ttl());
}

absl::StatusOr<v3electionpb::LeaderKey> EtcdClient::Campaign(const std::string& name,
                                                              int64_t lease,
                                                              const std::string& value,
                                                              grpc::ClientContext* context) {
  v3electionpb::CampaignRequest request;
  request.set_name(name);
  request.set_lease(lease);
  request.set_value(value);
  v3electionpb::CampaignResponse response;
  Member& member = members_[current_.load(std::memory_order_relaxed) % members_.size()];
  grpc::Status status = member.election->Campaign(context, request, &response);
  if (!status.ok()) {
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      current_.fetch_add(1, std::memory_order_relaxed);  // the next campaign tries another member
    }
    return FromGrpc(status, "etcd campaign");
  }
  return response.leader();
}

absl::StatusOr<std::string> EtcdClient::Leader(const std::string& name) {
  v3electionpb::LeaderRequest request;
  request.set_name(name);
  v3electionpb::LeaderResponse response;
  absl::Status status = OnSomeMember([&](Member& member, grpc::ClientContext& context) {
    response.Clear();
    return member.election->Leader(&context, request, &response);
  });
  if (!status.ok()) {
    // etcd answers "election: no leader" when nobody leads.
    if (absl::StrContains(status.message(), "no leader")) {
      return absl::NotFoundError("no leader elected");
    }
    return status;
  }
  return response.kv().value();
}

absl::Status EtcdClient::Resign(const v3electionpb::LeaderKey& leader) {
  v3electionpb::ResignRequest request;
  *request.mutable_leader() = leader;
  v3electionpb::ResignResponse response;
  return OnSomeMember([&](Member& member, grpc::ClientContext& context) {
    return member.election->Resign(&context, request, &response);
  });
}

}  // namespace rescale::server
