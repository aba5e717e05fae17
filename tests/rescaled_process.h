// Rescaled: a rescaled process of this build started by a test (on a free
// port, its address read from its "serving on" log line), with stubs of the
// four rescale.v1 services on it, and the waits the process tests share;
// for high availability, a pair of replicas on one etcd.
#ifndef RESCALE_TESTS_RESCALED_PROCESS_H_
#define RESCALE_TESTS_RESCALED_PROCESS_H_

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <catch2/catch.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/etcd_cluster.h"
#include "tests/eventually.h"

namespace rescale::testing {

namespace v1 = rescale::v1;

inline absl::Time FromTimestamp(const google::protobuf::Timestamp& t) {
  return absl::FromUnixSeconds(t.seconds()) + absl::Nanoseconds(t.nanos());
}

// One rescaled process and stubs on its address.
struct Rescaled {
  std::unique_ptr<ChildProcess> process;
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::JobService::Stub> jobs;
  std::unique_ptr<v1::MetricsService::Stub> metrics;
  std::unique_ptr<v1::RecommendationService::Stub> recs;
  std::unique_ptr<v1::ClusterService::Stub> cluster;

  // rescaled on a free port with `flags` after these defaults:
  // --capacity_gpus=40 --plan_interval=200ms --cooldown=0s, and metrics on
  // a free port too (--metrics_listen's default, 9464, would collide with
  // the other processes tests start in parallel).
  static std::unique_ptr<Rescaled> Start(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {
        RESCALED_BINARY,      "--listen=127.0.0.1:0",  "--metrics_listen=127.0.0.1:0",
        "--capacity_gpus=40", "--plan_interval=200ms", "--cooldown=0s"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto started = ChildProcess::Start(argv);
    REQUIRE(started.ok());
    auto rescaled = std::make_unique<Rescaled>();
    rescaled->process = *std::move(started);
    const std::optional<std::string> line =
        rescaled->process->WaitForLine("rescaled serving on ", absl::Seconds(30));
    INFO(rescaled->process->Output());
    REQUIRE(line.has_value());
    const size_t begin = line->find("serving on ") + std::string("serving on ").size();
    rescaled->address = line->substr(begin, line->find(' ', begin) - begin);
    rescaled->channel = grpc::CreateChannel(rescaled->address, grpc::InsecureChannelCredentials());
    rescaled->jobs = v1::JobService::NewStub(rescaled->channel);
    rescaled->metrics = v1::MetricsService::NewStub(rescaled->channel);
    rescaled->recs = v1::RecommendationService::NewStub(rescaled->channel);
    rescaled->cluster = v1::ClusterService::NewStub(rescaled->channel);
    return rescaled;
  }

  v1::Cluster GetCluster() {
    grpc::ClientContext ctx;
    v1::Cluster cluster_view;
    grpc::Status status = this->cluster->GetCluster(&ctx, {}, &cluster_view);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return cluster_view;
  }

  // Waits (asking GetCluster, at most 30 s) until rescaled has published a
  // plan and checkpointed the measurements after `after`.
  void AwaitPlanAndCheckpointAfter(absl::Time after) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (true) {
      v1::Cluster now = GetCluster();
      if (now.has_planned_at() && FromTimestamp(now.planned_at()) > after &&
          now.has_last_checkpoint_at() && FromTimestamp(now.last_checkpoint_at()) > after) {
        return;
      }
      REQUIRE(absl::Now() < deadline);
      // rescaled has no stream of its checkpoints; ask again shortly.
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  std::map<std::string, v1::Recommendation> Recommendations() {
    grpc::ClientContext ctx;
    v1::ListRecommendationsResponse reply;
    grpc::Status status = recs->ListRecommendations(&ctx, {}, &reply);
    REQUIRE(status.ok());
    std::map<std::string, v1::Recommendation> by_job;
    for (const v1::Recommendation& rec : reply.recommendations()) by_job[rec.job_id()] = rec;
    return by_job;
  }
};

inline std::string Leadership(Rescaled& rescaled) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::Cluster cluster;
  grpc::Status status = rescaled.cluster->GetCluster(&ctx, {}, &cluster);
  return status.ok() ? cluster.leadership() : "unreachable: " + status.error_message();
}

// rescaled flags for high availability on `etcd` (a 2 s lease by default:
// quick tests).
inline std::vector<std::string> HaFlags(const EtcdCluster& etcd,
                                        const std::string& lease_ttl = "2s") {
  return {"--state=etcd://" + etcd.Endpoints() + "/rescale", "--lease_ttl=" + lease_ttl};
}

// Starts two replicas and returns them leader first.
inline std::pair<std::unique_ptr<Rescaled>, std::unique_ptr<Rescaled>> StartPair(
    const EtcdCluster& etcd, const std::string& lease_ttl = "2s") {
  auto a = Rescaled::Start(HaFlags(etcd, lease_ttl));
  auto b = Rescaled::Start(HaFlags(etcd, lease_ttl));
  REQUIRE(Eventually(absl::Seconds(10),
                     [&] { return Leadership(*a) == "leader" || Leadership(*b) == "leader"; }));
  if (Leadership(*b) == "leader") std::swap(a, b);
  REQUIRE(
      Eventually(absl::Seconds(10), [&] { return Leadership(*b) == "follower of " + a->address; }));
  return {std::move(a), std::move(b)};
}

}  // namespace rescale::testing

#endif  // RESCALE_TESTS_RESCALED_PROCESS_H_
