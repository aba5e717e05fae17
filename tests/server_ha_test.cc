// Two in-process RescaleServers on one real etcd (Debian's etcd-server):
// the leadership's threads (campaign, lease renewal, follower's watch) and
// the engine's replication, run where ThreadSanitizer sees them (this case
// is [concurrency]: the TSan build runs it). A clean shutdown of the
// leader resigns, so the follower leads at once, with every change.
// EtcdLeadership::Create refuses options it cannot use, and a leader's local
// lease deadline is on the injected clock.
#include <grpcpp/create_channel.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "rescale/clock.h"
#include "rescale/decision_engine.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tests/etcd_cluster.h"

namespace {

namespace v1 = rescale::v1;
using rescale::server::EtcdLeadership;
using rescale::server::LeadershipOptions;
using rescale::server::RescaleServer;

std::unique_ptr<RescaleServer> StartReplica(const rescale::testing::EtcdCluster& etcd) {
  rescale::server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.engine.plan_interval = absl::Milliseconds(100);
  options.etcd_client =
      std::make_shared<rescale::server::EtcdClient>(std::vector<std::string>{etcd.Endpoints()});
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
  // Both sides: the follower can see a plan's records in etcd before the
  // leader's own completion has published them on its board.
  REQUIRE(Eventually([&] {
    return follower.engine().ListRecommendations().size() == 30 &&
           leader.engine().ListRecommendations().size() == 30;
  }));
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

TEST_CASE("EtcdLeadership::Create refuses a lease TTL out of range or missing parts, naming them") {
  rescale::ManualClock clock;
  auto engine = rescale::DecisionEngine::Create(rescale::EngineOptions(), &clock);
  REQUIRE(engine.ok());
  // No etcd is needed: the options are checked before anything is used.
  auto create = [&](absl::Duration ttl) {
    return EtcdLeadership::Create(LeadershipOptions{.lease_ttl = ttl, .advertise_address = ""},
                                  nullptr, nullptr, **engine, nullptr, &clock)
        .status();
  };
  for (absl::Duration ttl : {absl::Milliseconds(999), absl::ZeroDuration(), absl::Seconds(-5),
                             absl::Hours(1) + absl::Seconds(1), absl::InfiniteDuration()}) {
    const absl::Status status = create(ttl);
    INFO(absl::FormatDuration(ttl));
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(
        std::string(status.message()),
        Catch::Contains("lease_ttl must be between 1s and 1h, got " + absl::FormatDuration(ttl)));
    CHECK(rescale::server::ValidateLeadershipOptions({.lease_ttl = ttl, .advertise_address = ""})
              .code() == absl::StatusCode::kInvalidArgument);
  }
  // At the limits the TTL passes, and the next check names what is missing.
  for (absl::Duration ttl : {absl::Seconds(1), absl::Hours(1)}) {
    CHECK(rescale::server::ValidateLeadershipOptions({.lease_ttl = ttl, .advertise_address = ""})
              .ok());
    const absl::Status status = create(ttl);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(status.message()), Catch::Contains("no etcd client"));
  }
  auto client = std::make_shared<rescale::server::EtcdClient>(
      std::vector<std::string>{"127.0.0.1:1"});  // never dialled: Create fails first
  const absl::Status no_store =
      EtcdLeadership::Create(LeadershipOptions(), client, nullptr, **engine, nullptr, &clock)
          .status();
  CHECK_THAT(std::string(no_store.message()), Catch::Contains("no etcd state store"));

  // RescaleServer::Start passes the error on before serving anything.
  rescale::testing::EtcdCluster etcd(1);
  rescale::server::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.etcd_client =
      std::make_shared<rescale::server::EtcdClient>(std::vector<std::string>{etcd.Endpoints()});
  auto store = rescale::server::EtcdStateStore::Open("etcd://" + etcd.Endpoints() + "/s",
                                                     options.etcd_client, "/s");
  REQUIRE(store.ok());
  options.etcd_state = *std::move(store);
  options.leadership.lease_ttl = absl::Milliseconds(500);
  auto started = RescaleServer::Start(options);
  REQUIRE_FALSE(started.ok());
  CHECK(started.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(started.status().message()), Catch::Contains("lease_ttl"));
}

TEST_CASE("a leader stops leading when its lease's deadline passes on the injected clock",
          "[concurrency]") {
  spdlog::set_level(spdlog::level::warn);
  rescale::testing::EtcdCluster etcd(1);
  auto client =
      std::make_shared<rescale::server::EtcdClient>(std::vector<std::string>{etcd.Endpoints()});
  auto opened =
      rescale::server::EtcdStateStore::Open("etcd://" + etcd.Endpoints() + "/s", client, "/s");
  REQUIRE(opened.ok());
  std::shared_ptr<rescale::server::EtcdStateStore> store = *std::move(opened);
  rescale::ManualClock clock;
  rescale::EngineOptions engine_options;
  engine_options.state = store;
  engine_options.start_leading = false;
  auto engine = rescale::DecisionEngine::Create(engine_options, &clock);
  REQUIRE(engine.ok());
  const absl::Duration ttl = absl::Seconds(30);  // etcd's own lease outlives the test
  std::atomic<int> elected = 0;
  std::atomic<int> stepped_down = 0;
  auto created = EtcdLeadership::Create(
      LeadershipOptions{.lease_ttl = ttl, .advertise_address = "127.0.0.1:7"}, client, store,
      **engine, [&](bool leader) { (leader ? elected : stepped_down)++; }, &clock);
  REQUIRE(created.ok());
  EtcdLeadership& leadership = **created;
  leadership.Start();
  REQUIRE(Eventually([&] { return leadership.IsLeader(); }));
  CHECK(leadership.LeaderAddress() == "127.0.0.1:7");
  CHECK(elected == 1);
  CHECK(stepped_down == 0);

  // Real time barely moves; the injected clock passes the deadline (as after
  // SIGSTOP). The renewing thread never got to renew: the clock did not
  // reach its first renewal (ttl / 3) before the jump.
  clock.Advance(ttl);
  CHECK_FALSE(leadership.IsLeader());
  CHECK(leadership.LeaderAddress().empty());
  // The renewing thread, woken by the jump, ends the term: the campaign
  // steps down (and campaigns again, which waits for the old key's lease
  // to end in etcd's real time).
  CHECK(Eventually([&] { return stepped_down == 1; }));
  CHECK_FALSE(leadership.IsLeader());
  leadership.Stop();
}

}  // namespace
