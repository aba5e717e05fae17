// Two in-process RescaleServers on one real etcd (Debian's etcd-server):
// the leadership's threads (campaign, lease renewal, follower's watch) and
// the engine's replication, run where ThreadSanitizer sees them (this case
// is [concurrency]: the TSan build runs it). A clean shutdown of the
// leader resigns, so the follower leads at once, with every change.
#include <grpcpp/create_channel.h>

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/etcd_cluster.h"

namespace {

namespace v1 = rescale::v1;
using rescale::server::RescaleServer;

std::unique_ptr<RescaleServer> StartReplica(const rescale::testing::EtcdCluster& etcd) {
  rescale::server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.engine.plan_interval = absl::Milliseconds(100);
  options.etcd_client = std::make_shared<rescale::server::EtcdClient>(
      std::vector<std::string>{etcd.Endpoints()});
  auto store = rescale::server::EtcdStateStore::Open("etcd://" + etcd.Endpoints() + "/s",
                                                     options.etcd_client, "/s");
  REQUIRE(store.ok());
  options.etcd_state = *std::move(store);
  options.leadership.lease_ttl = absl::Seconds(2);
  auto started = RescaleServer::Start(options);
  REQUIRE(started.ok());
  return *std::move(started);
}

// Asks `done` every 20 ms until it holds or 15 s have passed (the
// leadership has no event to wait on from outside).
bool Eventually(const std::function<bool()>& done) {
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

TEST_CASE("in-process replicas on etcd: the follower copies the leader and leads after it resigns",
          "[concurrency]") {
  spdlog::set_level(spdlog::level::warn);
  rescale::testing::EtcdCluster etcd(1);
  std::unique_ptr<RescaleServer> a = StartReplica(etcd);
  std::unique_ptr<RescaleServer> b = StartReplica(etcd);
  REQUIRE(Eventually([&] { return a->leadership()->IsLeader() || b->leadership()->IsLeader(); }));
  if (b->leadership()->IsLeader()) std::swap(a, b);
  RescaleServer& leader = *a;
  RescaleServer& follower = *b;

  for (int i = 0; i < 30; ++i) {
    rescale::JobSpec spec;
    spec.job_id = "ns/job-" + std::to_string(i);
    spec.min_replicas = 1;
    spec.max_replicas = 4;
    spec.local_batch_size = 32;
    REQUIRE(leader.engine().RegisterJob(spec).ok());
  }
  REQUIRE(Eventually([&] { return follower.engine().ListRecommendations().size() == 30; }));
  const auto before = leader.engine().ListRecommendations();
  CHECK_FALSE(follower.leadership()->IsLeader());
  CHECK(Eventually([&] { return follower.leadership()->LeaderAddress() == leader.address(); }));

  leader.Shutdown(absl::ZeroDuration());  // resigns: no TTL to wait out
  REQUIRE(Eventually([&] { return follower.leadership()->IsLeader(); }));
  const auto after = follower.engine().ListRecommendations();
  REQUIRE(after.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(after[i].job_id == before[i].job_id);
    CHECK(after[i].generation == before[i].generation);
    CHECK(after[i].replicas == before[i].replicas);
  }
  rescale::JobSpec spec;
  spec.job_id = "ns/after";
  spec.min_replicas = 1;
  spec.max_replicas = 2;
  spec.local_batch_size = 32;
  CHECK(follower.engine().RegisterJob(spec).ok());
}

}  // namespace
