// High availability on a real etcd (Debian's etcd-server, one and three
// members on free loopback ports): the etcd state store's round trip and
// fencing, and rescaled replicas of this build electing a leader, failing
// over after kill -9 and after SIGSTOP, refusing writes on followers with
// the leader's address, and surviving the loss of one etcd member but not
// of two (then saying why, and resuming when quorum returns).
//
// Waits are on the programs' own answers (GetCluster's leadership, a write
// accepted), asked again every 50 ms up to a deadline: a rescaled has no
// stream of its leadership to block on.
#include <grpcpp/create_channel.h>
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/rescalectl/cli.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rescale/v1/rescale.grpc.pb.h"
#include "server/etcd/etcd_client.h"
#include "server/etcd/etcd_state_store.h"
#include "tests/etcd_cluster.h"
#include "tests/rescaled_process.h"

namespace {

namespace v1 = rescale::v1;
using rescale::server::EtcdClient;
using rescale::server::EtcdStateStore;
using rescale::testing::EtcdCluster;
using rescale::testing::Eventually;
using rescale::testing::HaFlags;
using rescale::testing::Leadership;
using rescale::testing::Rescaled;
using rescale::testing::StartPair;

grpc::Status Register(Rescaled& rescaled, const std::string& id, std::string* leader = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::RegisterJobRequest req;
  req.mutable_spec()->set_job_id(id);
  req.mutable_spec()->set_min_replicas(1);
  req.mutable_spec()->set_max_replicas(4);
  req.mutable_spec()->set_local_batch_size(32);
  v1::Job reply;
  grpc::Status status = rescaled.jobs->RegisterJob(&ctx, req, &reply);
  if (leader != nullptr) {
    auto it = ctx.GetServerTrailingMetadata().find("rescale-leader");
    *leader = it == ctx.GetServerTrailingMetadata().end()
                  ? ""
                  : std::string(it->second.data(), it->second.size());
  }
  return status;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(Rescaled& rescaled,
                                                            const std::string& service) {
  auto health = grpc::health::v1::Health::NewStub(rescaled.channel);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  grpc::health::v1::HealthCheckResponse reply;
  REQUIRE(health->Check(&ctx, req, &reply).ok());
  return reply.status();
}

TEST_CASE("etcd state store: what the leader writes loads back, without the lease nothing is") {
  EtcdCluster etcd(1);
  auto client = std::make_shared<EtcdClient>(std::vector<std::string>{etcd.Endpoints()});
  auto opened = EtcdStateStore::Open("etcd://" + etcd.Endpoints() + "/t", client, "/t");
  REQUIRE(opened.ok());
  std::shared_ptr<EtcdStateStore> store = *std::move(opened);

  rescale::StoredJob job;
  job.spec.job_id = "ns/a";
  job.spec.min_replicas = 1;
  job.spec.max_replicas = 4;
  job.current_replicas = 2;
  job.spec.queue = "team-a";
  // A follower (no fence) writes nothing.
  absl::Status refused = store->PutJob(job);
  CHECK(absl::IsUnavailable(refused));
  CHECK_THAT(std::string(refused.message()), Catch::Contains("not the leader"));

  absl::StatusOr<int64_t> lease = client->LeaseGrant(absl::Seconds(5));
  REQUIRE(lease.ok());
  grpc::ClientContext campaign;
  auto won = client->Campaign(store->election_name(), *lease, "me:1", &campaign);
  REQUIRE(won.ok());
  store->SetFence(EtcdStateStore::Fence{won->key(), *lease});
  bool lost = false;
  store->SetFenceLostCallback([&](int64_t fenced_lease) { lost = fenced_lease == *lease; });
  REQUIRE(store->PutJob(job).ok());
  REQUIRE(store->PutCapacity({12, {{4, 3}, {2, 6}}, 20, {}}).ok());
  const std::vector<rescale::QueueSpec> queues = {{"team-a", 8, "research", 4, 2, 2.5},
                                                  {"team-b", 4, "research", {}, {}, 1}};
  REQUIRE(store->PutQueues(queues).ok());
  std::vector<rescale::Recommendation> recs(300);  // more than one transaction's worth
  for (size_t i = 0; i < recs.size(); ++i) {
    recs[i].job_id = absl::StrCat("ns/r", i);
    recs[i].replicas = static_cast<uint32_t>(i % 7);
    recs[i].generation = i + 1;
  }
  REQUIRE(store->PutRecommendations(recs).ok());
  rescale::StoredMeasurements measured;
  measured.job_id = "ns/a";
  measured.sizes.push_back({.world_size = 2, .sample_count = 10, .step_seconds = 0.25});
  measured.exploration_stopped = true;
  REQUIRE(store->PutMeasurements({&measured, 1}).ok());
  REQUIRE(store->DeleteJob("ns/r5", 6).ok());
  // A job deregistered after its measurements were checkpointed: they are
  // not loaded, and the next checkpoint drops them from their bucket.
  rescale::StoredJob gone = job;
  gone.spec.job_id = "ns/gone";
  REQUIRE(store->PutJob(gone).ok());
  rescale::StoredMeasurements gone_measured = measured;
  gone_measured.job_id = "ns/gone";
  REQUIRE(store->PutMeasurements({&gone_measured, 1}).ok());
  REQUIRE(store->DeleteJob("ns/gone", 0).ok());
  auto raw_measurements = [&] {
    etcdserverpb::RangeRequest range;
    range.set_key("/t/meas/");
    range.set_range_end(rescale::server::PrefixEnd("/t/meas/"));
    const auto response = client->Range(range);
    REQUIRE(response.ok());
    std::string all;
    for (const auto& kv : response->kvs()) all += kv.value();
    return all;
  };
  CHECK_THAT(raw_measurements(), Catch::Contains("ns/gone"));

  absl::StatusOr<rescale::StoredState> loaded = store->Load();
  REQUIRE(loaded.ok());
  REQUIRE(loaded->jobs.size() == 1);
  CHECK(loaded->jobs[0] == job);
  CHECK(loaded->capacity_gpus == 12u);
  CHECK(loaded->capacity_slots == std::vector<rescale::ReplicaSlots>{{4, 3}, {2, 6}});
  CHECK(loaded->capacity_allocatable_gpus == 20);
  CHECK(loaded->queues == queues);
  CHECK(loaded->recommendations.size() == 299);
  REQUIRE(loaded->retired_generations.size() == 1);
  CHECK(loaded->retired_generations[0] == std::pair<std::string, uint64_t>("ns/r5", 6));
  REQUIRE(loaded->measurements.size() == 1);
  CHECK(loaded->measurements[0].job_id == "ns/a");
  CHECK(loaded->measurements[0].sizes[0].step_seconds == 0.25);
  CHECK(loaded->measurements[0].exploration_stopped);
  // A prefix written before slots and allocatable GPUs existed has neither
  // key: no slots, none reported.
  {
    etcdserverpb::TxnRequest old;
    old.add_success()->mutable_request_delete_range()->set_key("/t/capacity_slots");
    old.add_success()->mutable_request_delete_range()->set_key("/t/capacity_allocatable_gpus");
    REQUIRE(client->Txn(old).ok());
    absl::StatusOr<rescale::StoredState> before_slots = store->Load();
    REQUIRE(before_slots.ok());
    CHECK(before_slots->capacity_gpus == 12u);
    CHECK(before_slots->capacity_slots.empty());
    CHECK(before_slots->capacity_allocatable_gpus == 0);
  }
  REQUIRE(store->PutMeasurements({&measured, 1}).ok());
  CHECK_THAT(raw_measurements(), !Catch::Contains("ns/gone"));

  // A group commit (StateStore::Write, the engine's writer): a job
  // registered, recommended and deregistered in one group, and another job
  // changed twice, go out as one commit of the last operation on each key
  // (etcd refuses a transaction naming a key twice).
  {
    rescale::StoredJob b = job;
    b.spec.job_id = "ns/b";
    rescale::StoredJob b_later = b;
    b_later.current_replicas = 4;
    rescale::Recommendation b_rec;
    b_rec.job_id = "ns/b";
    b_rec.replicas = 3;
    b_rec.generation = 2;
    rescale::StoredJob c = job;
    c.spec.job_id = "ns/c";
    rescale::Recommendation c_rec = b_rec;
    c_rec.job_id = "ns/c";
    const std::vector<rescale::StateChange> group = {
        b,
        std::vector<rescale::Recommendation>{b_rec, c_rec},
        c,
        b_later,
        rescale::DeletedJob{"ns/c", 2},
        rescale::CapacityReport{16, {}, 0, {}}};
    REQUIRE(store->Write(group).ok());
    absl::StatusOr<rescale::StoredState> grouped = store->Load();
    REQUIRE(grouped.ok());
    REQUIRE(grouped->jobs.size() == 2);  // ns/a and ns/b; ns/c came and went
    CHECK(grouped->jobs[1] == b_later);
    CHECK(grouped->capacity_gpus == 16u);
    bool b_recommended = false;
    for (const auto& rec : grouped->recommendations) {
      CHECK(rec.job_id != "ns/c");
      b_recommended |= rec.job_id == "ns/b" && rec.generation == 2;
    }
    CHECK(b_recommended);
    CHECK(std::find(grouped->retired_generations.begin(), grouped->retired_generations.end(),
                    std::pair<std::string, uint64_t>("ns/c", 2)) !=
          grouped->retired_generations.end());
  }

  // The lease ends (as when its holder was paused past the TTL): the next
  // write compares false, writes nothing, and says so.
  REQUIRE(client->LeaseRevoke(*lease).ok());
  job.current_replicas = 3;
  absl::Status fenced = store->PutJob(job);
  CHECK(absl::IsUnavailable(fenced));
  CHECK_THAT(std::string(fenced.message()), Catch::Contains("lost the leadership"));
  CHECK(lost);
  loaded = store->Load();
  REQUIRE(loaded.ok());
  CHECK(loaded->jobs[0].current_replicas == 2);

  // A record that does not decode stops the load, naming its key; nothing
  // is dropped silently.
  etcdserverpb::TxnRequest garbage;
  etcdserverpb::RequestOp* put = garbage.add_success();
  put->mutable_request_put()->set_key("/t/jobs/ns/broken");
  put->mutable_request_put()->set_value("{not json");
  REQUIRE(client->Txn(garbage).ok());
  loaded = store->Load();
  REQUIRE_FALSE(loaded.ok());
  CHECK(absl::IsDataLoss(loaded.status()));
  CHECK_THAT(std::string(loaded.status().message()), Catch::Contains("/t/jobs/ns/broken"));

  // A prefix written by a newer rescaled is refused, and left as it is.
  etcdserverpb::TxnRequest newer;
  put = newer.add_success();
  put->mutable_request_put()->set_key("/n/schema");
  put->mutable_request_put()->set_value("99");
  REQUIRE(client->Txn(newer).ok());
  auto refused_open = EtcdStateStore::Open("etcd://" + etcd.Endpoints() + "/n", client, "/n");
  REQUIRE_FALSE(refused_open.ok());
  CHECK_THAT(std::string(refused_open.status().message()), Catch::Contains("newer rescaled"));
}

TEST_CASE(
    "two rescaled on one etcd: a follower refuses writes, naming the leader, and takes over "
    "after kill -9 with everything acknowledged") {
  EtcdCluster etcd(1);
  // Not a structured binding: clang 14 cannot capture those in lambdas.
  auto pair = StartPair(etcd);
  auto& leader = pair.first;
  auto& follower = pair.second;
  // A readiness probe on a Rescale service routes to the leader only; both
  // are alive.
  using Status = grpc::health::v1::HealthCheckResponse;
  CHECK(Health(*leader, "rescale.v1.JobService") == Status::SERVING);
  CHECK(Health(*follower, "rescale.v1.JobService") == Status::NOT_SERVING);
  CHECK(Health(*follower, "rescale.v1.MetricsService") == Status::NOT_SERVING);
  CHECK(Health(*follower, "") == Status::SERVING);

  std::string named;
  grpc::Status refused = Register(*follower, "ns/refused", &named);
  CHECK(refused.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK_THAT(refused.error_message(), Catch::Contains(leader->address));
  CHECK(named == leader->address);

  for (int i = 0; i < 20; ++i) REQUIRE(Register(*leader, absl::StrCat("ns/job-", i)).ok());
  // The follower's copy follows (a watch, not a reload).
  REQUIRE(Eventually(absl::Seconds(10), [&] { return follower->Recommendations().size() == 20; }));
  // Apply what the leader recommends, as the adapter does, until a plan
  // after the last apply changes nothing. One read is not the leader's
  // settled state: a job not started yet may be resized by any plan (a
  // first start costs no restart), and a plan (every 200 ms) may run between
  // the read and the applies. Comparing against one read failed in CI under
  // load: four jobs "went" from 4 replicas to 1 across the failover, which
  // the old leader had itself decided after the read.
  std::map<std::string, v1::Recommendation> before;
  const auto same_targets = [](const std::map<std::string, v1::Recommendation>& a,
                               const std::map<std::string, v1::Recommendation>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
      return x.first == y.first && x.second.replicas() == y.second.replicas() &&
             x.second.generation() == y.second.generation();
    });
  };
  REQUIRE(Eventually(absl::Seconds(20), [&] {
    before = leader->Recommendations();
    for (const auto& [id, rec] : before) {
      grpc::ClientContext ctx;
      v1::ReportAppliedRequest req;
      req.set_job_id(id);
      req.set_replicas(rec.replicas());
      req.set_generation(rec.generation());
      v1::ReportAppliedResponse reply;
      REQUIRE(leader->recs->ReportApplied(&ctx, req, &reply).ok());
    }
    const absl::Time applied_at = absl::Now();
    REQUIRE(Eventually(absl::Seconds(10), [&] {
      const v1::Cluster cluster = leader->GetCluster();
      return cluster.has_planned_at() &&
             rescale::testing::FromTimestamp(cluster.planned_at()) > applied_at;
    }));
    return same_targets(leader->Recommendations(), before);
  }));

  const absl::Time killed_at = absl::Now();
  leader->process->Kill();
  REQUIRE(Eventually(absl::Seconds(10), [&] { return Register(*follower, "ns/after").ok(); }));
  const absl::Duration takeover = absl::Now() - killed_at;
  UNSCOPED_INFO("took over in " << absl::FormatDuration(takeover));
  CHECK(takeover < absl::Seconds(10));
  CHECK(Leadership(*follower) == "leader");
  // Its health turns SERVING as it starts taking writes (the same moment,
  // give or take the call that set it).
  CHECK(Eventually(absl::Seconds(2),
                   [&] { return Health(*follower, "rescale.v1.JobService") == Status::SERVING; }));

  std::map<std::string, v1::Recommendation> after = follower->Recommendations();
  for (const auto& [id, rec] : before) {
    INFO(id);
    REQUIRE(after.count(id));
    // Why each side chose its size, for a failure (once seen in CI under
    // load: four jobs went from 4 replicas to 1 after the takeover).
    INFO("before: " << rec.reason() << " / after: " << after.at(id).reason());
    // Same target and generation: no training job restarts for a failover.
    CHECK(after.at(id).replicas() == rec.replicas());
    CHECK(after.at(id).generation() == rec.generation());
    grpc::ClientContext ctx;
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    REQUIRE(follower->jobs->GetJob(&ctx, req, &job).ok());
    CHECK(job.status().current_replicas() == rec.replicas());
    CHECK(job.status().last_applied_generation() == rec.generation());
  }
  // rescalectl given every replica's address (the dead one first) finds
  // the leader and changes things there.
  {
    std::istringstream in(
        "job_id: ns/from-cli\nmin_replicas: 1\nmax_replicas: 2\nlocal_batch_size: 32\n");
    std::ostringstream out, err;
    const std::string servers = leader->address + "," + follower->address;
    CHECK(rescale::cli::RunCli({"rescalectl", "--server", servers, "register", "-f", "-"}, in, out,
                               err) == 0);
    INFO(err.str());
    CHECK_THAT(out.str(), Catch::Contains("ns/from-cli registered"));
    std::ostringstream status_out, status_err;
    CHECK(rescale::cli::RunCli({"rescalectl", "--server", servers, "status"}, status_out,
                               status_err) == 0);
    CHECK_THAT(status_out.str(),
               Catch::Contains("Leader:    " + follower->address + " (this server: leader)"));
  }
  // The new leader plans: the job registered on it gets its recommendation.
  CHECK(Eventually(absl::Seconds(10),
                   [&] { return follower->Recommendations().count("ns/after") == 1; }));
  CHECK_FALSE(follower->Recommendations().count("ns/refused"));
}

TEST_CASE("a leader paused past its lease writes nothing when it resumes, and steps down") {
  EtcdCluster etcd(1);
  // Not a structured binding: clang 14 cannot capture those in lambdas.
  auto pair = StartPair(etcd);
  auto& old_leader = pair.first;
  auto& other = pair.second;
  REQUIRE(Register(*old_leader, "ns/before").ok());

  old_leader->process->Signal(SIGSTOP);
  REQUIRE(Eventually(absl::Seconds(10), [&] { return Leadership(*other) == "leader"; }));
  // A change sent to the paused one waits in its socket until it runs
  // again; then its lease's deadline has passed, whichever of its threads
  // runs first.
  std::string named;
  grpc::Status late;
  std::thread caller([&] { late = Register(*old_leader, "ns/late", &named); });
  old_leader->process->Signal(SIGCONT);
  caller.join();
  CHECK(late.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(Eventually(absl::Seconds(10),
                   [&] { return Leadership(*old_leader) == "follower of " + other->address; }));
  CHECK((named.empty() || named == other->address));

  // Nothing of the old leader's reached etcd; the new leader serves.
  REQUIRE(Register(*other, "ns/after").ok());
  REQUIRE(Eventually(absl::Seconds(10), [&] { return old_leader->Recommendations().size() == 2; }));
  std::map<std::string, v1::Recommendation> seen = old_leader->Recommendations();
  CHECK(seen.count("ns/before"));
  CHECK(seen.count("ns/after"));
  CHECK_FALSE(seen.count("ns/late"));
}

TEST_CASE(
    "three etcd members: one down changes nothing, two down stop the leader, which says "
    "why, until quorum returns") {
  EtcdCluster etcd(3);
  // A 6 s lease, not the 2 s of the other tests: once (ASan, two loaded
  // cores) the leader lost its 2 s lease with one member down. Renewing
  // through another member takes the paused one's timeout first and, when
  // the paused one was etcd's Raft leader, a new Raft election (500 ms
  // election timeout, more under load); what this test is about is quorum,
  // not how fast that goes.
  // Not a structured binding: clang 14 cannot capture those in lambdas.
  auto pair = StartPair(etcd, "6s");
  auto& leader = pair.first;
  auto& follower = pair.second;
  REQUIRE(Register(*leader, "ns/a").ok());

  etcd.Pause(0);  // the member the replicas talk to first
  CHECK(Register(*leader, "ns/b").ok());
  CHECK(Eventually(absl::Seconds(10), [&] {
    return Leadership(*leader) == "leader" &&
           Leadership(*follower) == "follower of " + leader->address;
  }));

  etcd.Pause(1);
  CHECK(Eventually(absl::Seconds(15), [&] {
    return Leadership(*leader).starts_with("not leading") &&
           Leadership(*follower).find("leader") != 0;
  }));
  UNSCOPED_INFO("without quorum: " << Leadership(*leader));
  CHECK(Register(*leader, "ns/c").error_code() == grpc::StatusCode::UNAVAILABLE);

  etcd.Resume(0);
  etcd.Resume(1);
  CHECK(Eventually(absl::Seconds(20), [&] {
    return Register(*leader, "ns/d").ok() || Register(*follower, "ns/d").ok();
  }));
  CHECK((Leadership(*leader) == "leader") != (Leadership(*follower) == "leader"));
}

}  // namespace
