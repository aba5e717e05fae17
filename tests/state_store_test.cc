// Tests of the state stores (rescale/state_store.h): what is put comes back
// on Load, from the same memory store and from a SQLite file reopened by a
// new store; files in use, from a newer rescaled, damaged or not ours are
// refused with an error naming the file, and left as they were.
#include "rescale/state_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "rescale/read_file.h"
#include "src/state_store_internal.h"
#include "tests/temp_dir.h"

namespace rescale {
namespace {

using testing::TempDir;

StoredJob SampleJob(const std::string& id) {
  StoredJob job;
  job.spec.job_id = id;
  job.spec.min_replicas = 2;
  job.spec.max_replicas = 16;
  job.spec.gpus_per_replica = 4;
  job.spec.priority = -3;
  job.spec.preemptible = false;
  job.spec.restart_cost_seconds = 42.5;
  job.spec.local_batch_size = 64;
  job.spec.policy = "hpa";
  job.spec.prior = {{.replicas = 1, .samples_per_second = 100.25, .uncertainty = 3},
                    {.replicas = 4, .samples_per_second = 350, .uncertainty = 0}};
  job.spec.parameters = {{"cooldown_seconds", "120"}};
  job.spec.total_samples = 1'000'000'000'000ull;
  job.spec.batch_scaling = BatchLimits{.initial_batch = 256,
                                       .max_batch = 8192,
                                       .min_local_batch = 16,
                                       .max_local_batch = 512,
                                       .accumulation = true};
  job.current_replicas = 4;
  job.suspended = true;
  job.last_applied_generation = 7;
  job.last_applied_at = absl::FromUnixNanos(1'700'000'000'123'456'789);
  job.has_applied = true;
  job.registered_at = absl::FromUnixSeconds(1'699'999'000);
  job.last_change_at = absl::FromUnixSeconds(1'700'000'000);
  // started_at stays "never"; InfinitePast must survive the round trip.
  job.stopped_at = absl::FromUnixSeconds(1'700'000'100);
  job.previous_replicas = 2;
  job.scale_events = {{absl::FromUnixSeconds(1'699'999'500), 2},
                      {absl::FromUnixSeconds(1'700'000'000), -1}};
  return job;
}

Recommendation SampleRecommendation(const std::string& id, uint64_t generation) {
  Recommendation rec;
  rec.job_id = id;
  rec.replicas = 3;
  rec.action = Action::kScaleDown;
  rec.generation = generation;
  rec.reason = "3 replicas (12 GPUs): one more replica would add only 1.5% throughput";
  rec.binding_constraint = BindingConstraint::kEfficiency;
  rec.current_samples_per_second = 812.5;
  rec.predicted_samples_per_second = std::numeric_limits<double>::infinity();
  rec.queue_position = 0;
  rec.decided_at = absl::FromUnixNanos(1'700'000'200'000'000'001);
  rec.policy = "planner";
  rec.gpus = 12;
  rec.value_one_fewer = -0.25;
  return rec;
}

void CheckSameRecommendation(const Recommendation& got, const Recommendation& want) {
  CHECK(got.job_id == want.job_id);
  CHECK(got.replicas == want.replicas);
  CHECK(got.suspend == want.suspend);
  CHECK(got.action == want.action);
  CHECK(got.generation == want.generation);
  CHECK(got.reason == want.reason);
  CHECK(got.binding_constraint == want.binding_constraint);
  CHECK(got.current_samples_per_second == want.current_samples_per_second);
  CHECK(got.predicted_samples_per_second == want.predicted_samples_per_second);
  CHECK(got.queue_position == want.queue_position);
  CHECK(got.decided_at == want.decided_at);
  CHECK(got.policy == want.policy);
  CHECK(got.gpus == want.gpus);
  CHECK(got.value_one_more == want.value_one_more);
  CHECK(got.value_one_fewer == want.value_one_fewer);
  CHECK(got.local_batch_size == want.local_batch_size);
  CHECK(got.accumulation_steps == want.accumulation_steps);
  CHECK(got.predicted_goodput == want.predicted_goodput);
  CHECK(got.statistical_efficiency == want.statistical_efficiency);
}

// A goodput-planned job's recommendation: SampleRecommendation with a batch.
Recommendation SampleGoodputRecommendation(const std::string& id, uint64_t generation) {
  Recommendation rec = SampleRecommendation(id, generation);
  rec.local_batch_size = 64;
  rec.accumulation_steps = 2;
  rec.predicted_goodput = 431.5;
  rec.statistical_efficiency = 0.8125;
  return rec;
}

StoredMeasurements SampleMeasurements(const std::string& id) {
  StoredMeasurements m;
  m.job_id = id;
  for (uint32_t n : {1u, 2u, 4u}) {
    SizeStats s;
    s.world_size = n;
    s.sample_count = 40 * n;
    s.lifetime_count = 100 * n;
    s.step_seconds = 0.2 + 0.01 * n;
    s.spread_seconds = 0.003;
    s.mean_batch = 32;
    s.steps_processed = 1000 + n;
    s.samples_processed = 32'000 * n;
    s.samples_per_second = n * 32 / s.step_seconds;
    s.from_window = n != 4;
    s.last_sample_at = absl::FromUnixNanos(1'700'000'000'000'000'000 + n);
    if (n != 4) {  // gradient statistics reported at 1 and 2 only
      s.gradient_count = 30 * n;
      s.gradient_sqr = 0.25 * n;
      s.gradient_noise = 12.5 + n;
    }
    m.sizes.push_back(s);
  }
  m.exploration_stopped = true;
  m.recent_recommendations = {{absl::FromUnixSeconds(1'700'000'000), 3},
                              {absl::FromUnixSeconds(1'700'000'030), 4}};
  return m;
}

void CheckSameMeasurements(const StoredMeasurements& got, const StoredMeasurements& want) {
  CHECK(got.job_id == want.job_id);
  CHECK(got.exploration_stopped == want.exploration_stopped);
  CHECK(got.recent_recommendations == want.recent_recommendations);
  REQUIRE(got.sizes.size() == want.sizes.size());
  for (size_t i = 0; i < got.sizes.size(); ++i) {
    const SizeStats& a = got.sizes[i];
    const SizeStats& b = want.sizes[i];
    CHECK(a.world_size == b.world_size);
    CHECK(a.sample_count == b.sample_count);
    CHECK(a.lifetime_count == b.lifetime_count);
    CHECK(a.step_seconds == b.step_seconds);
    CHECK(a.spread_seconds == b.spread_seconds);
    CHECK(a.mean_batch == b.mean_batch);
    CHECK(a.steps_processed == b.steps_processed);
    CHECK(a.samples_processed == b.samples_processed);
    CHECK(a.samples_per_second == b.samples_per_second);
    CHECK(a.from_window == b.from_window);
    CHECK(a.last_sample_at == b.last_sample_at);
    CHECK(a.gradient_count == b.gradient_count);
    CHECK(a.gradient_sqr == b.gradient_sqr);
    CHECK(a.gradient_noise == b.gradient_noise);
  }
}

std::unique_ptr<StateStore> MustOpen(const std::string& spec) {
  absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore(spec);
  INFO(store.status());
  REQUIRE(store.ok());
  return *std::move(store);
}

// Puts two jobs, capacity and recommendations, deregisters one, and checks
// what `reopen` then loads.
std::vector<QueueSpec> TwoQueues() {
  QueueSpec a{"team-a", 32, "research", 16, 8, 2.5};
  QueueSpec b{"team-b", 32, "", std::nullopt, std::nullopt, 1};
  return {a, b};
}

void CheckRoundTrip(const std::function<std::unique_ptr<StateStore>()>& open) {
  {
    std::unique_ptr<StateStore> store = open();
    REQUIRE(store->PutJob(SampleJob("ns/a")).ok());
    REQUIRE(store->PutJob(SampleJob("ns/b")).ok());
    StoredJob changed = SampleJob("ns/a");
    changed.current_replicas = 8;
    changed.spec.queue = "team-a";
    changed.spec.admission = "kueue";
    REQUIRE(store->PutJob(changed).ok());  // replaces
    REQUIRE(store->PutCapacity({64, {{8, 1}}, 80, {}}).ok());
    // Replaces, slots and allocatable GPUs and all.
    REQUIRE(store->PutCapacity({64, {{8, 3}, {4, 7}}, 72, {}}).ok());
    REQUIRE(store->PutQueues(std::vector<QueueSpec>{{"old", 1, "", std::nullopt, std::nullopt, 1}})
                .ok());
    REQUIRE(store->PutQueues(TwoQueues()).ok());  // replaces
    const std::vector<Recommendation> recs = {SampleRecommendation("ns/a", 5),
                                              SampleRecommendation("ns/b", 9)};
    REQUIRE(store->PutRecommendations(recs).ok());
    REQUIRE(
        store->PutMeasurements({{SampleMeasurements("ns/a"), SampleMeasurements("ns/b")}}).ok());
    REQUIRE(store->DeleteJob("ns/b", 9).ok());
    // A checkpoint that raced with the deregistration does not bring them
    // back.
    REQUIRE(store->PutMeasurements({{SampleMeasurements("ns/b")}}).ok());
  }
  std::unique_ptr<StateStore> store = open();
  absl::StatusOr<StoredState> state = store->Load();
  INFO(state.status());
  REQUIRE(state.ok());
  REQUIRE(state->jobs.size() == 1);
  StoredJob want = SampleJob("ns/a");
  want.current_replicas = 8;
  want.spec.queue = "team-a";
  want.spec.admission = "kueue";
  CHECK(state->jobs[0] == want);
  CHECK(state->queues == TwoQueues());
  CHECK(state->jobs[0].started_at == absl::InfinitePast());
  CHECK(state->capacity_gpus == 64u);
  CHECK(state->capacity_slots == std::vector<ReplicaSlots>{{8, 3}, {4, 7}});
  CHECK(state->capacity_allocatable_gpus == 72);
  REQUIRE(state->recommendations.size() == 1);
  CheckSameRecommendation(state->recommendations[0], SampleRecommendation("ns/a", 5));
  REQUIRE(state->retired_generations.size() == 1);
  CHECK(state->retired_generations[0] == std::make_pair(std::string("ns/b"), uint64_t{9}));
  REQUIRE(state->measurements.size() == 1);  // ns/b's went with it
  CheckSameMeasurements(state->measurements[0], SampleMeasurements("ns/a"));

  // Registered again: a new recommendation takes over from the retired one.
  REQUIRE(store->PutJob(SampleJob("ns/b")).ok());
  REQUIRE(store->PutRecommendations({{SampleRecommendation("ns/b", 10)}}).ok());
  state = store->Load();
  REQUIRE(state.ok());
  CHECK(state->retired_generations.empty());
  REQUIRE(state->recommendations.size() == 2);
  CHECK(state->recommendations[1].generation == 10);

  // The total alone: no slots, and no allocatable GPUs reported, any more.
  REQUIRE(store->PutCapacity({32, {}, 0, {}}).ok());
  state = store->Load();
  REQUIRE(state.ok());
  CHECK(state->capacity_gpus == 32u);
  CHECK(state->capacity_slots.empty());
  CHECK(state->capacity_allocatable_gpus == 0);
  CHECK(state->queues == TwoQueues());  // the capacity leaves the queues alone

  REQUIRE(store->PutQueues({}).ok());
  state = store->Load();
  REQUIRE(state.ok());
  CHECK(state->queues.empty());
}

TEST_CASE("memory state store gives back what was put, to the next user of the same store") {
  std::unique_ptr<StateStore> shared = MustOpen("memory");
  CHECK(shared->Describe() == "memory");
  // A "restart" hands the same store to a new user: nothing is copied.
  struct Borrowed : StateStore {
    StateStore* inner;
    explicit Borrowed(StateStore* s) : inner(s) {}
    std::string Describe() const override { return inner->Describe(); }
    absl::StatusOr<StoredState> Load() override { return inner->Load(); }
    absl::Status PutJob(const StoredJob& job) override { return inner->PutJob(job); }
    absl::Status DeleteJob(std::string_view id, uint64_t g) override {
      return inner->DeleteJob(id, g);
    }
    absl::Status PutCapacity(const CapacityReport& gpus) override {
      return inner->PutCapacity(gpus);
    }
    absl::Status PutQueues(std::span<const QueueSpec> queues) override {
      return inner->PutQueues(queues);
    }
    absl::Status PutRecommendations(std::span<const Recommendation> recs) override {
      return inner->PutRecommendations(recs);
    }
    absl::Status PutMeasurements(std::span<const StoredMeasurements> jobs) override {
      return inner->PutMeasurements(jobs);
    }
  };
  CheckRoundTrip([&] { return std::make_unique<Borrowed>(shared.get()); });
}

TEST_CASE("sqlite state store: a new store on the same file loads every record put before") {
  TempDir dir;
  const std::string spec = "sqlite:" + dir.File("state.db");
  CheckRoundTrip([&] { return MustOpen(spec); });
  CHECK(MustOpen(spec)->Describe() == spec);
}

TEST_CASE("sqlite state store: a new file loads as empty") {
  TempDir dir;
  absl::StatusOr<StoredState> state = MustOpen("sqlite:" + dir.File("new.db"))->Load();
  REQUIRE(state.ok());
  CHECK(state->jobs.empty());
  CHECK(!state->capacity_gpus.has_value());
  CHECK(state->recommendations.empty());
}

TEST_CASE("sqlite state store: a file in use by another store is refused, naming it") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  std::unique_ptr<StateStore> first = MustOpen("sqlite:" + path);
  REQUIRE(first->PutCapacity({8, {}, 0, {}}).ok());
  absl::StatusOr<std::unique_ptr<StateStore>> second = OpenStateStore("sqlite:" + path);
  REQUIRE(!second.ok());
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(second.status().message()),
             Catch::Contains(path) && Catch::Contains("in use"));
  // The first goes on writing.
  CHECK(first->PutCapacity({16, {}, 0, {}}).ok());
}

// Runs `sql` on the file directly, as a damaged or foreign file would be.
void RunSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  INFO((error != nullptr ? error : ""));
  sqlite3_free(error);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST_CASE("sqlite state store: a file from a newer rescaled is refused and left as it was") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  REQUIRE(MustOpen("sqlite:" + path)->PutCapacity({8, {}, 0, {}}).ok());
  RunSql(path, "UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  const std::string before = Bytes(path);
  absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore("sqlite:" + path);
  REQUIRE(!store.ok());
  CHECK(store.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(store.status().message()), Catch::Contains(path) &&
                                                        Catch::Contains("newer rescaled") &&
                                                        Catch::Contains("schema version 99"));
  CHECK(Bytes(path) == before);
}

TEST_CASE("sqlite state store: a file of schema version 1 is migrated, its records kept") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  // What a version-1 rescaled wrote: its tables, no measurements table.
  RunSql(path,
         "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
         "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, record TEXT NOT NULL);"
         "CREATE TABLE recommendations (job_id TEXT PRIMARY KEY, record TEXT NOT NULL);"
         "CREATE TABLE retired_generations (job_id TEXT PRIMARY KEY, generation INTEGER NOT "
         "NULL);"
         "CREATE TABLE cluster (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
         "INSERT INTO meta VALUES ('schema_version', '1');"
         "INSERT INTO cluster VALUES ('capacity_gpus', 12);");
  {
    std::unique_ptr<StateStore> store = MustOpen("sqlite:" + path);
    absl::StatusOr<StoredState> state = store->Load();
    REQUIRE(state.ok());
    CHECK(state->capacity_gpus == 12u);
    CHECK(state->capacity_slots.empty());          // written before slots existed
    CHECK(state->capacity_allocatable_gpus == 0);  // nor were allocatable GPUs reported
    CHECK(state->measurements.empty());
    REQUIRE(store->PutJob(SampleJob("ns/a")).ok());
    REQUIRE(store->PutMeasurements({{SampleMeasurements("ns/a")}}).ok());
  }
  absl::StatusOr<StoredState> state = MustOpen("sqlite:" + path)->Load();
  REQUIRE(state.ok());
  REQUIRE(state->measurements.size() == 1);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* read = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &read,
                             nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(read) == SQLITE_ROW);
  CHECK(sqlite3_column_int(read, 0) == kStateSchemaVersion);
  sqlite3_finalize(read);
  sqlite3_close(db);
}

TEST_CASE("sqlite state store: capacity slots that do not parse stop Load, naming them") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  REQUIRE(MustOpen("sqlite:" + path)->PutCapacity({16, {{8, 2}}, 0, {}}).ok());
  RunSql(path, "UPDATE cluster SET value = '8=two' WHERE key = 'capacity_slots'");
  absl::StatusOr<StoredState> state = MustOpen("sqlite:" + path)->Load();
  REQUIRE(state.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(state.status().message()), Catch::Contains("the capacity's slots"));
  CHECK_THAT(std::string(state.status().message()), Catch::Contains("8=two"));
}

TEST_CASE("capacity slots read back from their text form, and nothing else does") {
  using state_internal::SlotsFromText;
  using state_internal::SlotsToText;
  const std::vector<ReplicaSlots> slots = {{8, 3}, {4, 7}, {1, 0}};
  CHECK(SlotsToText(slots) == "8=3,4=7,1=0");
  CHECK(*SlotsFromText(SlotsToText(slots)) == slots);
  CHECK(SlotsFromText("")->empty());
  for (const char* bad : {"8", "8=", "=3", "8=3,", "8=-1", "a=1", "8=99999999999", "8=3;4=1"}) {
    INFO(bad);
    CHECK_FALSE(SlotsFromText(bad).ok());
  }
}

// Job ns/a's measurements (of one size) a fresh state file loads once
// `record` was written into its measurements table, as an older server wrote
// it.
StoredMeasurements LoadWrittenRow(const std::string& record) {
  TempDir dir;
  const std::string path = dir.File("state.db");
  REQUIRE(MustOpen("sqlite:" + path)->PutCapacity({1, {}, 0, {}}).ok());
  RunSql(path, "INSERT INTO measurements (job_id, record) VALUES ('ns/a', '" + record + "')");
  absl::StatusOr<StoredState> state = MustOpen("sqlite:" + path)->Load();
  INFO(state.status().ToString());
  REQUIRE(state.ok());
  REQUIRE(state->measurements.size() == 1);
  REQUIRE(state->measurements[0].sizes.size() == 1);
  return state->measurements[0];
}

TEST_CASE("sqlite state store: measurement rows written before gradient statistics are read") {
  // A positional row of the eleven fields before gradient statistics.
  const SizeStats s =
      LoadWrittenRow("[[2, 7, 9, 0.25, 0.01, 32, 5, 320, 256.0, true, null]]").sizes[0];
  CHECK(s.samples_processed == 320);
  CHECK(s.gradient_count == 0);
  CHECK(s.gradient_sqr == 0);
  CHECK(s.gradient_noise == 0);
}

TEST_CASE("sqlite state store: measurements written as keyed objects are still read") {
  // How the first version-2 files wrote a size: an object with named fields.
  const StoredMeasurements kept = LoadWrittenRow(
      "[{\"world_size\": 2, \"sample_count\": 7, \"lifetime_count\": 9, \"step_seconds\": "
      "0.25, \"spread_seconds\": 0.01, \"mean_batch\": 32, \"steps_processed\": 5, "
      "\"samples_processed\": 320, \"samples_per_second\": \"inf\", \"from_window\": true, "
      "\"last_sample_at\": null}]");
  const SizeStats& s = kept.sizes[0];
  CHECK(s.world_size == 2);
  CHECK(s.sample_count == 7);
  CHECK(s.lifetime_count == 9);
  CHECK(s.step_seconds == 0.25);
  CHECK(s.samples_processed == 320);
  CHECK(std::isinf(s.samples_per_second));
  CHECK(s.from_window);
  CHECK(s.last_sample_at == absl::InfinitePast());
  // Written before the policies' memory was kept: none.
  CHECK(!kept.exploration_stopped);
  CHECK(kept.recent_recommendations.empty());
}

TEST_CASE("sqlite state store: a file that is not a database is refused and left as it was") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  const std::string garbage(8192, 'x');
  std::ofstream(path, std::ios::binary) << garbage;
  absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore("sqlite:" + path);
  REQUIRE(!store.ok());
  CHECK(store.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(store.status().message()),
             Catch::Contains(path) && Catch::Contains("backup"));
  CHECK(Bytes(path) == garbage);
}

TEST_CASE("sqlite state store: another program's SQLite file is refused") {
  TempDir dir;
  const std::string path = dir.File("other.db");
  RunSql(path, "CREATE TABLE customers (id INTEGER)");
  absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore("sqlite:" + path);
  REQUIRE(!store.ok());
  CHECK_THAT(std::string(store.status().message()),
             Catch::Contains(path) && Catch::Contains("not a Rescale state file"));
}

TEST_CASE("a recommendation's batch and goodput are kept when set, and old records still load") {
  using state_internal::RecommendationFromJson;
  using state_internal::RecommendationToJson;
  const Recommendation planned = SampleGoodputRecommendation("ns/a", 5);
  absl::StatusOr<Recommendation> read = RecommendationFromJson(RecommendationToJson(planned));
  REQUIRE(read.ok());
  CheckSameRecommendation(*read, planned);

  // Planned without accumulation: an explicit 0 stays set.
  Recommendation no_accumulation = planned;
  no_accumulation.accumulation_steps = 0;
  read = RecommendationFromJson(RecommendationToJson(no_accumulation));
  REQUIRE(read.ok());
  CHECK(read->accumulation_steps == std::optional<uint32_t>(0));

  // Planned on throughput: none of the keys written, none read back.
  const Recommendation plain = SampleRecommendation("ns/b", 9);
  const std::string text = RecommendationToJson(plain);
  for (const char* key :
       {"local_batch_size", "accumulation_steps", "predicted_goodput", "statistical_efficiency"}) {
    CHECK(text.find(key) == std::string::npos);
  }
  read = RecommendationFromJson(text);
  REQUIRE(read.ok());
  CheckSameRecommendation(*read, plain);

  // A record as rescaled wrote it before goodput planning.
  read = RecommendationFromJson(
      R"({"job_id":"ns/old","replicas":2,"suspend":false,"action":1,"generation":3,)"
      R"("reason":"r","binding_constraint":1,"current_samples_per_second":10.5,)"
      R"("predicted_samples_per_second":12,"queue_position":0,"decided_at":null,)"
      R"("policy":"planner","gpus":2})");
  INFO(read.status());
  REQUIRE(read.ok());
  CHECK(read->replicas == 2);
  CHECK_FALSE(read->local_batch_size.has_value());
  CHECK_FALSE(read->accumulation_steps.has_value());
  CHECK_FALSE(read->predicted_goodput.has_value());
  CHECK_FALSE(read->statistical_efficiency.has_value());
}

TEST_CASE("sqlite state store: a goodput recommendation loads with its batch from a new store") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  {
    std::unique_ptr<StateStore> store = MustOpen("sqlite:" + path);
    REQUIRE(store->PutJob(SampleJob("ns/a")).ok());
    REQUIRE(store->PutJob(SampleJob("ns/b")).ok());
    REQUIRE(store
                ->PutRecommendations(
                    {{SampleGoodputRecommendation("ns/a", 5), SampleRecommendation("ns/b", 9)}})
                .ok());
  }
  absl::StatusOr<StoredState> state = MustOpen("sqlite:" + path)->Load();
  INFO(state.status());
  REQUIRE(state.ok());
  REQUIRE(state->recommendations.size() == 2);
  CheckSameRecommendation(state->recommendations[0], SampleGoodputRecommendation("ns/a", 5));
  CheckSameRecommendation(state->recommendations[1], SampleRecommendation("ns/b", 9));
}

TEST_CASE("sqlite state store: a record that does not parse stops Load, naming the job") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  REQUIRE(MustOpen("sqlite:" + path)->PutJob(SampleJob("ns/a")).ok());
  RunSql(path, "UPDATE jobs SET record = '{\"spec\": 1}' WHERE job_id = 'ns/a'");
  absl::StatusOr<StoredState> state = MustOpen("sqlite:" + path)->Load();
  REQUIRE(!state.ok());
  CHECK(state.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(state.status().message()),
             Catch::Contains(path) && Catch::Contains("job ns/a"));
}

// A child process writes jobs one after another, telling the parent over a
// pipe after each write returns; the parent kills it (SIGKILL) after a
// random number of them, mid-way through the next. The file must then open
// and load, with every job the child was told is durable.
TEST_CASE("sqlite state store: a writer killed at random points leaves a file that loads") {
  TempDir dir;
  const std::string path = dir.File("state.db");
  std::mt19937 rng(20261204);
  int next_job = 0;
  for (int round = 0; round < 6; ++round) {
    int acks[2];
    REQUIRE(pipe(acks) == 0);
    const int first = next_job;
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(acks[0]);
      absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore("sqlite:" + path);
      if (!store.ok()) _exit(2);
      for (int i = first;; ++i) {
        StoredJob job = SampleJob("ns/job-" + std::to_string(i));
        job.last_applied_generation = static_cast<uint64_t>(i);
        if (!(*store)->PutJob(job).ok()) _exit(3);
        if (i % 3 == 0 &&
            !(*store)->PutRecommendations({{SampleRecommendation(job.spec.job_id, i)}}).ok())
          _exit(4);
        if (write(acks[1], &i, sizeof i) != sizeof i) _exit(5);
      }
    }
    close(acks[1]);
    const int wanted = std::uniform_int_distribution<int>(5, 60)(rng);
    int last_acked = -1;
    for (int k = 0; k < wanted; ++k) {
      REQUIRE(read(acks[0], &last_acked, sizeof last_acked) == sizeof last_acked);
    }
    REQUIRE(kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    // Acknowledgements the child wrote before the kill landed but the
    // parent had not read yet (a loaded machine) count too: read to the
    // end (the child is gone, so the pipe ends).
    for (int acked = 0; read(acks[0], &acked, sizeof acked) == sizeof acked;) last_acked = acked;
    close(acks[0]);
    CHECK(WIFSIGNALED(status));

    absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore("sqlite:" + path);
    INFO("round " << round << ": " << store.status());
    REQUIRE(store.ok());
    absl::StatusOr<StoredState> state = (*store)->Load();
    REQUIRE(state.ok());
    // Every acknowledged job is there, whole; at most the one being written
    // when the kill came is there too.
    CHECK(static_cast<int>(state->jobs.size()) >= last_acked + 1);
    CHECK(static_cast<int>(state->jobs.size()) <= last_acked + 2);
    for (const StoredJob& job : state->jobs) {
      const int i = std::stoi(job.spec.job_id.substr(std::string("ns/job-").size()));
      StoredJob want = SampleJob(job.spec.job_id);
      want.last_applied_generation = static_cast<uint64_t>(i);
      CHECK(job == want);
    }
    next_job = static_cast<int>(state->jobs.size());
  }
}

TEST_CASE("OpenStateStore names the flag and the backends for an unknown spec") {
  for (const char* spec : {"", "sqlite:", "postgres://db/rescale", "SQLITE:x.db"}) {
    absl::StatusOr<std::unique_ptr<StateStore>> store = OpenStateStore(spec);
    INFO(spec);
    REQUIRE(!store.ok());
    CHECK(store.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(store.status().message()), Catch::Contains("--state"));
  }
  TempDir dir;
  absl::StatusOr<std::unique_ptr<StateStore>> missing_dir =
      OpenStateStore("sqlite:" + dir.File("no/such/dir/state.db"));
  REQUIRE(!missing_dir.ok());
  CHECK(missing_dir.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(missing_dir.status().message()), Catch::Contains("no/such/dir"));
}

}  // namespace
}  // namespace rescale
