// EtcdStateStore: the StateStore on etcd, its writes fenced on the leader's
// lease. Records are the SQLite backend's JSON (src/state_store_internal.h),
// so both backends keep exactly the same things.
#include "server/etcd/etcd_state_store.h"

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <variant>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "rescale/status_macros.h"
#include "src/state_store_internal.h"

namespace rescale::server {
namespace {

using state_internal::GpuTypesFromJson;
using state_internal::GpuTypesToJson;
using state_internal::JobFromJson;
using state_internal::JobToJson;
using state_internal::MeasurementsFromJson;
using state_internal::MeasurementsToJson;
using state_internal::PolicyMemoryFromJson;
using state_internal::PolicyMemoryToJson;
using state_internal::QueuesFromJson;
using state_internal::QueuesToJson;
using state_internal::RecommendationFromJson;
using state_internal::RecommendationToJson;
using state_internal::SlotsFromText;
using state_internal::SlotsToText;

etcdserverpb::RequestOp PutOp(std::string key, std::string value) {
  etcdserverpb::RequestOp op;
  op.mutable_request_put()->set_key(std::move(key));
  op.mutable_request_put()->set_value(std::move(value));
  return op;
}

etcdserverpb::RequestOp DeleteOp(std::string key) {
  etcdserverpb::RequestOp op;
  op.mutable_request_delete_range()->set_key(std::move(key));
  return op;
}

// One job's line in its measurement bucket: the job id, its measurements
// and its policy memory, tab-separated (JSON as nlohmann writes it holds
// no raw tab or newline, and job ids are DNS-1123 labels and a slash).
std::string MeasurementsRecord(const StoredMeasurements& m) {
  return absl::StrCat(m.job_id, "\t", MeasurementsToJson(m.sizes), "\t", PolicyMemoryToJson(m));
}

absl::StatusOr<StoredMeasurements> MeasurementsFromRecord(std::string_view line) {
  const size_t first = line.find('\t');
  const size_t second = first == std::string_view::npos ? first : line.find('\t', first + 1);
  if (second == std::string_view::npos) {
    return absl::DataLossError("a measurement line is not job<TAB>sizes<TAB>memory");
  }
  StoredMeasurements m;
  m.job_id = std::string(line.substr(0, first));
  ASSIGN_OR_RETURN(m.sizes, MeasurementsFromJson(line.substr(first + 1, second - first - 1)));
  RETURN_IF_ERROR(PolicyMemoryFromJson(line.substr(second + 1), m));
  return m;
}

// A stable hash (FNV-1a): the bucket of a job must not change between
// builds or processes.
int BucketOf(std::string_view job_id, int buckets) {
  uint32_t hash = 2166136261u;
  for (unsigned char c : job_id) hash = (hash ^ c) * 16777619u;
  return static_cast<int>(hash % static_cast<uint32_t>(buckets));
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStateStore>> EtcdStateStore::Open(
    std::string spec, std::shared_ptr<EtcdClient> client, std::string prefix) {
  std::unique_ptr<EtcdStateStore> store(
      new EtcdStateStore(std::move(spec), std::move(client), std::move(prefix)));
  // The schema version: written once, by whichever rescaled comes first
  // (create-if-absent), and checked by every one after.
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_key(store->Key("schema"));
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_create_revision(0);
  *txn.add_success() = PutOp(store->Key("schema"), std::to_string(kEtcdSchemaVersion));
  txn.add_failure()->mutable_request_range()->set_key(store->Key("schema"));
  absl::StatusOr<etcdserverpb::TxnResponse> answer = store->client_->Txn(txn);
  if (!answer.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach etcd for ", store->spec_, ": ", answer.status().message()));
  }
  if (!answer->succeeded()) {
    const auto& kvs = answer->responses(0).response_range().kvs();
    int version = 0;
    if (kvs.empty() || !absl::SimpleAtoi(kvs[0].value(), &version)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: the key %s is not a schema version; this prefix holds something else than "
          "rescaled's state: choose another prefix",
          store->spec_, store->Key("schema")));
    }
    if (version > kEtcdSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s holds state of a newer rescaled (schema %d; this one reads up to %d): run that "
          "version or newer; the state was left as it is",
          store->spec_, version, kEtcdSchemaVersion));
    }
  }
  return store;
}

EtcdStateStore::EtcdStateStore(std::string spec, std::shared_ptr<EtcdClient> client,
                               std::string prefix)
    : spec_(std::move(spec)),
      client_(std::move(client)),
      prefix_(std::move(prefix)),
      records_(kMeasurementBuckets) {}

std::string EtcdStateStore::BucketKey(int bucket) const {
  return Key("meas", absl::StrFormat("%02x", bucket));
}

std::string EtcdStateStore::Key(absl::string_view kind, absl::string_view job_id) const {
  if (job_id.empty()) return absl::StrCat(prefix_, "/", kind);
  return absl::StrCat(prefix_, "/", kind, "/", job_id);
}

int64_t EtcdStateStore::last_load_revision() const {
  MutexLock lock(mu_);
  return last_load_revision_;
}

void EtcdStateStore::SetFence(std::optional<Fence> fence) {
  MutexLock lock(mu_);
  fence_ = std::move(fence);
}

void EtcdStateStore::SetFenceLostCallback(std::function<void(int64_t)> callback) {
  MutexLock lock(mu_);
  fence_lost_ = std::move(callback);
}

absl::Status EtcdStateStore::Commit(std::span<const etcdserverpb::RequestOp> ops) {
  std::optional<Fence> fence;
  {
    MutexLock lock(mu_);
    fence = fence_;
  }
  if (!fence.has_value()) {
    return absl::UnavailableError("this rescaled is not the leader: it writes no state (" + spec_ +
                                  ")");
  }
  // etcd also refuses requests over 1.5 MiB (--max-request-bytes).
  constexpr size_t kMaxTxnBytes = 1 << 20;
  std::vector<etcdserverpb::TxnRequest> txns;
  for (size_t begin = 0; begin < ops.size();) {
    etcdserverpb::TxnRequest& txn = txns.emplace_back();
    etcdserverpb::Compare* still_leader = txn.add_compare();
    still_leader->set_key(fence->key);
    still_leader->set_target(etcdserverpb::Compare::LEASE);
    still_leader->set_result(etcdserverpb::Compare::EQUAL);
    still_leader->set_lease(fence->lease);
    size_t bytes = 0;
    size_t end = begin;
    while (end < ops.size() && end - begin < static_cast<size_t>(kMaxOpsPerTxn) &&
           (end == begin || bytes + ops[end].ByteSizeLong() <= kMaxTxnBytes)) {
      bytes += ops[end].ByteSizeLong();
      *txn.add_success() = ops[end++];
    }
    begin = end;
  }
  // Several transactions go out together: each waits for etcd's disk sync,
  // and etcd syncs the transactions it has at once. A write of many is
  // therefore not atomic (nor was it ever: a checkpoint or a plan's
  // recommendations); each transaction is fenced on its own.
  std::vector<absl::StatusOr<etcdserverpb::TxnResponse>> answers(txns.size(),
                                                                 absl::UnknownError("not sent"));
  for (size_t first = 0; first < txns.size(); first += kTxnsInFlight) {
    const size_t last = std::min(txns.size(), first + kTxnsInFlight);
    std::vector<std::thread> senders;
    for (size_t i = first + 1; i < last; ++i) {
      senders.emplace_back([&, i] { answers[i] = client_->Txn(txns[i]); });
    }
    answers[first] = client_->Txn(txns[first]);
    for (std::thread& sender : senders) sender.join();
    for (size_t i = first; i < last; ++i) {
      if (!answers[i].ok()) return absl::UnavailableError(answers[i].status().message());
      if (answers[i]->succeeded()) continue;
      std::function<void(int64_t)> lost;
      {
        MutexLock lock(mu_);
        if (fence_.has_value() && fence_->lease == fence->lease) fence_.reset();
        lost = fence_lost_;
      }
      if (lost) lost(fence->lease);
      return absl::UnavailableError(absl::StrFormat(
          "this rescaled lost the leadership (its lease %x no longer holds %s): the write was "
          "refused",
          fence->lease, fence->key));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredState> EtcdStateStore::Load() {
  StoredState state;
  std::set<std::string> with_recommendation;
  const std::string begin = prefix_ + "/";
  etcdserverpb::RangeRequest range;
  range.set_key(begin);
  range.set_range_end(PrefixEnd(begin));
  range.set_limit(1000);
  int64_t revision = 0;
  ReplicatedChange change;
  while (true) {
    absl::StatusOr<etcdserverpb::RangeResponse> page = client_->Range(range);
    if (!page.ok()) {
      return absl::UnavailableError(
          absl::StrCat("cannot read the state in ", spec_, ": ", page.status().message()));
    }
    if (revision == 0) {
      // Every page at the first page's revision: one consistent snapshot.
      revision = page->header().revision();
      range.set_revision(revision);
    }
    for (const mvccpb::KeyValue& kv : page->kvs()) {
      mvccpb::Event event;
      event.set_type(mvccpb::Event::PUT);
      *event.mutable_kv() = kv;
      RETURN_IF_ERROR(AddEvent(event, change));
    }
    if (!page->more() || page->kvs().empty()) break;
    range.set_key(page->kvs(page->kvs_size() - 1).key() + std::string(1, '\0'));
  }
  state.jobs = std::move(change.jobs);
  state.capacity_gpus = change.capacity_gpus;
  // A prefix written before slots existed has no slots key: no slots.
  if (change.capacity_slots) state.capacity_slots = *std::move(change.capacity_slots);
  // Nor, before allocatable GPUs were reported, that key: not reported.
  state.capacity_allocatable_gpus = change.capacity_allocatable_gpus.value_or(0);
  // Nor, before GPU types existed, that key: one type.
  if (change.capacity_gpu_types) state.capacity_gpu_types = *std::move(change.capacity_gpu_types);
  // Nor, before queues existed, a queues key: none defined.
  if (change.queues) state.queues = *std::move(change.queues);
  state.recommendations = std::move(change.recommendations);
  std::set<std::string> kept_jobs;
  for (const StoredJob& job : state.jobs) kept_jobs.insert(job.spec.job_id);
  {
    // What the buckets hold now, for the next checkpoint to rewrite from;
    // lines of jobs that are gone are dropped by it.
    MutexLock lock(records_mu_);
    known_jobs_ = kept_jobs;
    for (auto& bucket : records_) bucket.clear();
    for (StoredMeasurements& m : change.measurements) {
      const int bucket = BucketOf(m.job_id, kMeasurementBuckets);
      if (!kept_jobs.contains(m.job_id)) {
        stale_buckets_.insert(bucket);
        continue;
      }
      records_[bucket][m.job_id] = MeasurementsRecord(m);
      state.measurements.push_back(std::move(m));
    }
  }
  std::sort(
      state.measurements.begin(), state.measurements.end(),
      [](const StoredMeasurements& a, const StoredMeasurements& b) { return a.job_id < b.job_id; });
  for (const Recommendation& rec : state.recommendations) with_recommendation.insert(rec.job_id);
  // A retired generation outlives the job's new recommendation (writing a
  // recommendation does not delete it, to keep plans' transactions small):
  // the recommendation wins, as in the SQLite backend.
  for (auto& retired : change.retired_generations) {
    if (!with_recommendation.contains(retired.first)) {
      state.retired_generations.push_back(std::move(retired));
    }
  }
  MutexLock lock(mu_);
  last_load_revision_ = revision;
  return state;
}

absl::Status EtcdStateStore::AddEvent(const mvccpb::Event& event, ReplicatedChange& change) const {
  const std::string& key = event.kv().key();
  if (!key.starts_with(prefix_ + "/")) return absl::OkStatus();
  const std::string_view rest = std::string_view(key).substr(prefix_.size() + 1);
  const size_t slash = rest.find('/');
  const std::string_view kind = rest.substr(0, slash);
  const std::string job_id =
      slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1));
  const std::string& value = event.kv().value();
  const bool put = event.type() == mvccpb::Event::PUT;
  auto named = [&](const absl::Status& status) {
    return absl::DataLossError(absl::StrCat(spec_, ": key ", key, ": ", status.message()));
  };
  if (kind == "jobs") {
    if (!put) {
      change.removed_jobs.push_back(job_id);
      return absl::OkStatus();
    }
    absl::StatusOr<StoredJob> job = JobFromJson(value);
    if (!job.ok()) return named(job.status());
    change.jobs.push_back(*std::move(job));
  } else if (kind == "recs" && put) {
    absl::StatusOr<Recommendation> rec = RecommendationFromJson(value);
    if (!rec.ok()) return named(rec.status());
    change.recommendations.push_back(*std::move(rec));
  } else if (kind == "retired" && put) {
    uint64_t generation = 0;
    if (!absl::SimpleAtoi(value, &generation)) return named(absl::DataLossError("not a number"));
    change.retired_generations.emplace_back(job_id, generation);
  } else if (kind == "meas" && put) {
    for (absl::string_view line : absl::StrSplit(value, '\n', absl::SkipEmpty())) {
      absl::StatusOr<StoredMeasurements> m =
          MeasurementsFromRecord(std::string_view(line.data(), line.size()));
      if (!m.ok()) return named(m.status());
      change.measurements.push_back(*std::move(m));
    }
  } else if (kind == "capacity" && put) {
    uint32_t gpus = 0;
    if (!absl::SimpleAtoi(value, &gpus)) return named(absl::DataLossError("not a GPU count"));
    change.capacity_gpus = gpus;
  } else if (kind == "capacity_slots" && put) {
    absl::StatusOr<std::vector<ReplicaSlots>> slots = SlotsFromText(value);
    if (!slots.ok()) return named(slots.status());
    change.capacity_slots = *std::move(slots);
  } else if (kind == "capacity_gpu_types" && put) {
    absl::StatusOr<std::vector<GpuType>> types = GpuTypesFromJson(value);
    if (!types.ok()) return named(types.status());
    change.capacity_gpu_types = *std::move(types);
  } else if (kind == "queues" && put) {
    absl::StatusOr<std::vector<QueueSpec>> queues = QueuesFromJson(value);
    if (!queues.ok()) return named(queues.status());
    change.queues = *std::move(queues);
  } else if (kind == "capacity_allocatable_gpus" && put) {
    uint32_t gpus = 0;
    if (!absl::SimpleAtoi(value, &gpus)) return named(absl::DataLossError("not a GPU count"));
    change.capacity_allocatable_gpus = gpus;
  }
  return absl::OkStatus();
}

// Each kind of change as etcd operations (AppendOps), and what the store
// remembers once they are written (Written): the Puts write one change, Write
// many in one Commit.
void EtcdStateStore::AppendOps(const StateChange& change,
                               std::vector<etcdserverpb::RequestOp>& ops) const {
  if (const auto* job = std::get_if<StoredJob>(&change)) {
    ops.push_back(PutOp(Key("jobs", job->spec.job_id), JobToJson(*job)));
  } else if (const auto* gone = std::get_if<DeletedJob>(&change)) {
    ops.push_back(DeleteOp(Key("jobs", gone->job_id)));
    ops.push_back(DeleteOp(Key("recs", gone->job_id)));
    if (gone->last_generation > 0) {
      ops.push_back(PutOp(Key("retired", gone->job_id), std::to_string(gone->last_generation)));
    }
  } else if (const auto* capacity = std::get_if<CapacityReport>(&change)) {
    // Four keys in one transaction, so followers see a total with its
    // slots, allocatable GPUs and types; each gets a key of its own (always
    // written, "" = no slots, "0" = not reported, "[]" = one type) so that
    // a rescaled from before them still reads /capacity as a number.
    ops.push_back(PutOp(Key("capacity"), std::to_string(capacity->total_gpus)));
    ops.push_back(PutOp(Key("capacity_slots"), SlotsToText(capacity->slots)));
    ops.push_back(
        PutOp(Key("capacity_allocatable_gpus"), std::to_string(capacity->allocatable_gpus)));
    ops.push_back(PutOp(Key("capacity_gpu_types"), GpuTypesToJson(capacity->gpu_types)));
  } else if (const auto* queues = std::get_if<QueueSet>(&change)) {
    ops.push_back(PutOp(Key("queues"), QueuesToJson(queues->queues)));
  } else if (const auto* recs = std::get_if<std::vector<Recommendation>>(&change)) {
    for (const Recommendation& rec : *recs) {
      ops.push_back(PutOp(Key("recs", rec.job_id), RecommendationToJson(rec)));
    }
  }
}

void EtcdStateStore::Written(const StateChange& change) {
  if (const auto* job = std::get_if<StoredJob>(&change)) {
    MutexLock lock(records_mu_);
    known_jobs_.insert(job->spec.job_id);
  } else if (const auto* gone = std::get_if<DeletedJob>(&change)) {
    // Its measurements leave their bucket at the next checkpoint; until then
    // a load ignores them (they belong to no job).
    MutexLock lock(records_mu_);
    known_jobs_.erase(gone->job_id);
    const int bucket = BucketOf(gone->job_id, kMeasurementBuckets);
    if (records_[bucket].erase(gone->job_id) > 0) stale_buckets_.insert(bucket);
  }
}

absl::Status EtcdStateStore::WriteOne(StateChange change) {
  std::vector<etcdserverpb::RequestOp> ops;
  AppendOps(change, ops);
  RETURN_IF_ERROR(Commit(ops));
  Written(change);
  return absl::OkStatus();
}

absl::Status EtcdStateStore::PutJob(const StoredJob& job) { return WriteOne(job); }

absl::Status EtcdStateStore::DeleteJob(std::string_view job_id, uint64_t last_generation) {
  return WriteOne(DeletedJob{std::string(job_id), last_generation});
}

absl::Status EtcdStateStore::PutCapacity(const CapacityReport& capacity) {
  return WriteOne(capacity);
}

absl::Status EtcdStateStore::PutQueues(std::span<const QueueSpec> queues) {
  return WriteOne(QueueSet{std::vector<QueueSpec>(queues.begin(), queues.end())});
}

absl::Status EtcdStateStore::PutRecommendations(std::span<const Recommendation> recs) {
  return WriteOne(std::vector<Recommendation>(recs.begin(), recs.end()));
}

absl::Status EtcdStateStore::Write(std::span<const StateChange> changes) {
  // The changes that wait together go out as one Commit (one Txn while they
  // fit in kMaxOpsPerTxn operations). A checkpoint's measurements keep their
  // own bucket writes (PutMeasurements), in their place in the order.
  std::vector<etcdserverpb::RequestOp> ops;
  std::vector<const StateChange*> pending;
  auto flush = [&]() -> absl::Status {
    if (pending.empty()) return absl::OkStatus();
    // etcd refuses a transaction that names a key twice; applied in order,
    // the last operation on a key is the one that stands, so only it is
    // sent (a plan's recommendation and a later deregistration, say).
    std::map<std::string_view, size_t> last;
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      last[op.has_request_put() ? op.request_put().key() : op.request_delete_range().key()] = i;
    }
    std::vector<etcdserverpb::RequestOp> unique;
    unique.reserve(last.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const auto& op = ops[i];
      if (last[op.has_request_put() ? op.request_put().key() : op.request_delete_range().key()] ==
          i) {
        unique.push_back(op);
      }
    }
    RETURN_IF_ERROR(Commit(unique));
    for (const StateChange* change : pending) Written(*change);
    ops.clear();
    pending.clear();
    return absl::OkStatus();
  };
  for (const StateChange& change : changes) {
    if (const auto* measured = std::get_if<std::vector<StoredMeasurements>>(&change)) {
      RETURN_IF_ERROR(flush());
      RETURN_IF_ERROR(PutMeasurements(*measured));
      continue;
    }
    AppendOps(change, ops);
    pending.push_back(&change);
  }
  return flush();
}

absl::Status EtcdStateStore::PutMeasurements(std::span<const StoredMeasurements> jobs) {
  MutexLock writing(bucket_write_mu_);
  std::set<int> buckets;
  std::vector<etcdserverpb::RequestOp> ops;
  {
    MutexLock lock(records_mu_);
    for (const StoredMeasurements& m : jobs) {
      if (!known_jobs_.contains(m.job_id)) continue;  // deregistered meanwhile
      const int bucket = BucketOf(m.job_id, kMeasurementBuckets);
      records_[bucket][m.job_id] = MeasurementsRecord(m);
      buckets.insert(bucket);
    }
    buckets.merge(stale_buckets_);
    stale_buckets_.clear();
    for (int bucket : buckets) {
      std::string value;
      for (const auto& [id, line] : records_[bucket]) absl::StrAppend(&value, line, "\n");
      ops.push_back(value.empty() ? DeleteOp(BucketKey(bucket))
                                  : PutOp(BucketKey(bucket), std::move(value)));
    }
  }
  absl::Status written = Commit(ops);
  if (!written.ok()) {
    // Written again, whole, by the next checkpoint.
    MutexLock lock(records_mu_);
    stale_buckets_.insert(buckets.begin(), buckets.end());
  }
  return written;
}

}  // namespace rescale::server
