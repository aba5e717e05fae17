// The SQLite state store (--state sqlite:PATH; see rescale/state_store.h).
//
// One file, in WAL mode with synchronous=FULL: each Put is one transaction,
// on disk when it returns, and a crash at any point leaves the file as of
// the last committed one. A lock file beside it (PATH.lock, flock: the
// kernel drops it when the process dies) is held from open to close, so a
// second rescaled on the same file fails at start-up instead of both
// writing it, while other readers (sqlite3's .backup) may still read it. Records are JSON, one row
// per job (see state_store_internal.h); the schema version lives in the file's `meta` table and
// older files are migrated forward in one transaction on open.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "rescale/mutex.h"
#include "rescale/status_macros.h"
#include "state_store_internal.h"

namespace rescale::state_internal {
namespace {

// Schema steps: kMigrations[v] takes a file at version v to v + 1; version 0
// is an empty file. A new version appends its step and bumps
// kStateSchemaVersion.
constexpr const char* kMigrations[] = {
    // 0 -> 1
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, record TEXT NOT NULL);"
    "CREATE TABLE recommendations (job_id TEXT PRIMARY KEY, record TEXT NOT NULL);"
    "CREATE TABLE retired_generations (job_id TEXT PRIMARY KEY, generation INTEGER NOT NULL);"
    "CREATE TABLE cluster (key TEXT PRIMARY KEY, value INTEGER NOT NULL);",
    // 1 -> 2: measurement checkpoints
    "CREATE TABLE measurements (job_id TEXT PRIMARY KEY, record TEXT NOT NULL);",
    // 2 -> 3: the policies' memory, checkpointed with the measurements
    "ALTER TABLE measurements ADD COLUMN policy_memory TEXT;",
};
static_assert(std::size(kMigrations) == kStateSchemaVersion);

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
struct StatementFinalizer {
  void operator()(sqlite3_stmt* statement) const { sqlite3_finalize(statement); }
};
using Statement = std::unique_ptr<sqlite3_stmt, StatementFinalizer>;

// An open file descriptor, closed (and its flock released) on destruction.
class LockFile {
 public:
  explicit LockFile(int fd) : fd_(fd) {}
  ~LockFile() {
    if (fd_ >= 0) close(fd_);
  }
  LockFile(const LockFile&) = delete;
  LockFile& operator=(const LockFile&) = delete;

 private:
  int fd_;
};

class SqliteStateStore : public StateStore {
 public:
  SqliteStateStore(std::string path, std::unique_ptr<LockFile> lock,
                   std::unique_ptr<sqlite3, DbCloser> db)
      : path_(std::move(path)), lock_(std::move(lock)), db_(std::move(db)) {}

  std::string Describe() const override { return "sqlite:" + path_; }

  // Checks the file and brings its schema up to date.
  absl::Status Init() {
    MutexLock lock(mu_);  // not shared yet; taken so the connection is only ever used under it
    RETURN_IF_ERROR(Exec("PRAGMA journal_mode=WAL"));
    RETURN_IF_ERROR(Exec("PRAGMA synchronous=FULL"));
    return InTransaction([&] {
      mu_.AssertHeld();  // body() runs inside InTransaction, under the caller's lock
      return CheckAndMigrate();
    });
  }

  absl::StatusOr<StoredState> Load() override {
    MutexLock lock(mu_);
    StoredState state;
    ASSIGN_OR_RETURN(Statement measured,
                     Prepare("SELECT job_id, record, policy_memory FROM measurements ORDER "
                             "BY job_id"));
    while (sqlite3_step(measured.get()) == SQLITE_ROW) {
      absl::StatusOr<std::vector<SizeStats>> sizes = MeasurementsFromJson(Text(measured.get(), 1));
      if (!sizes.ok()) {
        return Corrupt(absl::StrFormat("the measurements of %s", Text(measured.get(), 0)),
                       sizes.status());
      }
      StoredMeasurements m;
      m.job_id = Text(measured.get(), 0);
      m.sizes = *std::move(sizes);
      if (sqlite3_column_type(measured.get(), 2) != SQLITE_NULL) {
        if (absl::Status memory = PolicyMemoryFromJson(Text(measured.get(), 2), m); !memory.ok())
          return Corrupt(absl::StrFormat("the policy memory of %s", m.job_id), memory);
      }
      state.measurements.push_back(std::move(m));
    }
    ASSIGN_OR_RETURN(Statement jobs, Prepare("SELECT job_id, record FROM jobs ORDER BY job_id"));
    while (sqlite3_step(jobs.get()) == SQLITE_ROW) {
      absl::StatusOr<StoredJob> job = JobFromJson(Text(jobs.get(), 1));
      if (!job.ok()) return Corrupt(absl::StrFormat("job %s", Text(jobs.get(), 0)), job.status());
      state.jobs.push_back(*std::move(job));
    }
    ASSIGN_OR_RETURN(Statement recs,
                     Prepare("SELECT job_id, record FROM recommendations ORDER BY job_id"));
    while (sqlite3_step(recs.get()) == SQLITE_ROW) {
      absl::StatusOr<Recommendation> rec = RecommendationFromJson(Text(recs.get(), 1));
      if (!rec.ok()) {
        return Corrupt(absl::StrFormat("the recommendation of %s", Text(recs.get(), 0)),
                       rec.status());
      }
      state.recommendations.push_back(*std::move(rec));
    }
    ASSIGN_OR_RETURN(Statement retired,
                     Prepare("SELECT job_id, generation FROM retired_generations ORDER BY job_id"));
    while (sqlite3_step(retired.get()) == SQLITE_ROW) {
      state.retired_generations.emplace_back(
          Text(retired.get(), 0), static_cast<uint64_t>(sqlite3_column_int64(retired.get(), 1)));
    }
    ASSIGN_OR_RETURN(state.capacity_gpus, ClusterCount("capacity_gpus"));
    // Files written before allocatable GPUs were reported have no such row:
    // not reported.
    ASSIGN_OR_RETURN(std::optional<uint32_t> allocatable,
                     ClusterCount("capacity_allocatable_gpus"));
    state.capacity_allocatable_gpus = allocatable.value_or(0);
    // Files written before slots existed have no such row: no slots.
    ASSIGN_OR_RETURN(Statement slots,
                     Prepare("SELECT value FROM cluster WHERE key = 'capacity_slots'"));
    if (sqlite3_step(slots.get()) == SQLITE_ROW) {
      absl::StatusOr<std::vector<ReplicaSlots>> parsed = SlotsFromText(Text(slots.get(), 0));
      if (!parsed.ok()) return Corrupt("the capacity's slots", parsed.status());
      state.capacity_slots = *std::move(parsed);
    }
    // Files written before GPU types existed have no such row: one type.
    ASSIGN_OR_RETURN(Statement types,
                     Prepare("SELECT value FROM cluster WHERE key = 'capacity_gpu_types'"));
    if (sqlite3_step(types.get()) == SQLITE_ROW) {
      absl::StatusOr<std::vector<GpuType>> parsed = GpuTypesFromJson(Text(types.get(), 0));
      if (!parsed.ok()) return Corrupt("the capacity's GPU types", parsed.status());
      state.capacity_gpu_types = *std::move(parsed);
    }
    // Files written before queues existed have no such row: none defined.
    ASSIGN_OR_RETURN(Statement queues, Prepare("SELECT value FROM cluster WHERE key = 'queues'"));
    if (sqlite3_step(queues.get()) == SQLITE_ROW) {
      absl::StatusOr<std::vector<QueueSpec>> parsed = QueuesFromJson(Text(queues.get(), 0));
      if (!parsed.ok()) return Corrupt("the queues", parsed.status());
      state.queues = *std::move(parsed);
    }
    return state;
  }

  absl::Status PutJob(const StoredJob& job) override {
    MutexLock lock(mu_);
    return PutJobStatement(job);
  }

  absl::Status DeleteJob(std::string_view job_id, uint64_t last_generation) override {
    MutexLock lock(mu_);
    return InTransaction([&] {
      mu_.AssertHeld();  // body() runs inside InTransaction, under the caller's lock
      return DeleteJobInTransaction(job_id, last_generation);
    });
  }

  absl::Status PutCapacity(const CapacityReport& capacity) override {
    MutexLock lock(mu_);
    // The total, its slots and the allocatable GPUs in one transaction: a
    // crash never leaves the slots of one report with the total of another.
    // The slots are a text value in the cluster table (SQLite keeps the text
    // of a column declared INTEGER as text); they and the allocatable GPUs
    // are rows older files lack: no migration needed.
    return InTransaction([&] {
      mu_.AssertHeld();  // body() runs inside InTransaction, under the caller's lock
      return PutCapacityInTransaction(capacity);
    });
  }

  // The queues as one JSON text row of the cluster table (a row older
  // files lack: no migration needed).
  absl::Status PutQueues(std::span<const QueueSpec> queues) override {
    MutexLock lock(mu_);
    return InTransaction([&] {
      mu_.AssertHeld();  // body() runs inside InTransaction, under the caller's lock
      return PutQueuesInTransaction(queues);
    });
  }

  absl::Status PutRecommendations(std::span<const Recommendation> recs) override {
    if (recs.empty()) return absl::OkStatus();
    MutexLock lock(mu_);
    return InTransaction([&] {
      mu_.AssertHeld();  // body() runs inside InTransaction, under the caller's lock
      return PutRecommendationsInTransaction(recs);
    });
  }

  absl::Status PutMeasurements(std::span<const StoredMeasurements> jobs) override {
    if (jobs.empty()) return absl::OkStatus();
    MutexLock lock(mu_);
    return InTransaction([&] {
      mu_.AssertHeld();  // body() runs inside InTransaction, under the caller's lock
      return PutMeasurementsInTransaction(jobs);
    });
  }

  // Every change in one transaction: one fsync for all the writers whose
  // changes waited together (the engine's group commit).
  absl::Status Write(std::span<const StateChange> changes) override {
    if (changes.empty()) return absl::OkStatus();
    MutexLock lock(mu_);
    return InTransaction([&]() -> absl::Status {
      mu_.AssertHeld();  // body() runs inside InTransaction, under the caller's lock
      for (const StateChange& change : changes) {
        if (const auto* job = std::get_if<StoredJob>(&change)) {
          RETURN_IF_ERROR(PutJobStatement(*job));
        } else if (const auto* gone = std::get_if<DeletedJob>(&change)) {
          RETURN_IF_ERROR(DeleteJobInTransaction(gone->job_id, gone->last_generation));
        } else if (const auto* capacity = std::get_if<CapacityReport>(&change)) {
          RETURN_IF_ERROR(PutCapacityInTransaction(*capacity));
        } else if (const auto* queues = std::get_if<QueueSet>(&change)) {
          RETURN_IF_ERROR(PutQueuesInTransaction(queues->queues));
        } else if (const auto* recs = std::get_if<std::vector<Recommendation>>(&change)) {
          RETURN_IF_ERROR(PutRecommendationsInTransaction(*recs));
        } else {
          RETURN_IF_ERROR(
              PutMeasurementsInTransaction(std::get<std::vector<StoredMeasurements>>(change)));
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  // Runs `body` in one write transaction: committed when it succeeds, rolled
  // back when it or the commit fails, so the connection is never left with
  // a transaction open.
  absl::Status InTransaction(absl::FunctionRef<absl::Status()> body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
    absl::Status status = body();
    if (status.ok()) status = Exec("COMMIT");
    // A no-op when the failed COMMIT already ended the transaction.
    if (!status.ok()) sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    return status;
  }

  absl::Status CheckAndMigrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // A file that is not a database, or is damaged, fails here or below.
    ASSIGN_OR_RETURN(Statement check, Prepare("PRAGMA quick_check"));
    if (sqlite3_step(check.get()) != SQLITE_ROW) return Failed("PRAGMA quick_check");
    if (const std::string verdict = Text(check.get(), 0); verdict != "ok") {
      return absl::FailedPreconditionError(absl::StrFormat(
          "state file %s is damaged (SQLite's quick_check: %s); restore it from a backup, or "
          "move it aside to start with no state",
          path_, verdict));
    }
    int version = 0;
    ASSIGN_OR_RETURN(Statement has_meta,
                     Prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'"));
    if (sqlite3_step(has_meta.get()) == SQLITE_ROW) {
      ASSIGN_OR_RETURN(Statement read,
                       Prepare("SELECT value FROM meta WHERE key = 'schema_version'"));
      if (sqlite3_step(read.get()) != SQLITE_ROW) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "state file %s has no schema version; it was not written by rescaled, or is "
            "damaged: restore it from a backup, or move it aside to start with no state",
            path_));
      }
      version = sqlite3_column_int(read.get(), 0);
    } else {
      ASSIGN_OR_RETURN(Statement tables, Prepare("SELECT count(*) FROM sqlite_master"));
      if (sqlite3_step(tables.get()) == SQLITE_ROW && sqlite3_column_int(tables.get(), 0) > 0) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s is a SQLite file, but not a Rescale state file (no meta table); point --state "
            "at another file",
            path_));
      }
    }
    if (version > kStateSchemaVersion) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "state file %s was written by a newer rescaled (schema version %d; this one reads up "
          "to %d): run that version or newer, or restore a backup made by this one",
          path_, version, kStateSchemaVersion));
    }
    for (int v = version; v < kStateSchemaVersion; ++v) {
      RETURN_IF_ERROR(Exec(kMigrations[v]));
    }
    if (version != kStateSchemaVersion) {
      RETURN_IF_ERROR(Exec(absl::StrFormat(
          "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', '%d')",
          kStateSchemaVersion)));
    }
    return absl::OkStatus();
  }

  absl::Status PutJobStatement(const StoredJob& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ASSIGN_OR_RETURN(sqlite3_stmt * put,
                     Cached("INSERT OR REPLACE INTO jobs (job_id, record) VALUES (?, ?)"));
    Bind(put, 1, job.spec.job_id);
    Bind(put, 2, JobToJson(job));
    return Run(put, "record the job");
  }

  absl::Status PutQueuesInTransaction(std::span<const QueueSpec> queues)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ASSIGN_OR_RETURN(sqlite3_stmt * put,
                     Cached("INSERT OR REPLACE INTO cluster (key, value) VALUES ('queues', ?)"));
    Bind(put, 1, QueuesToJson(queues));
    return Run(put, "record the queues");
  }

  absl::Status PutCapacityInTransaction(const CapacityReport& capacity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    RETURN_IF_ERROR(PutClusterCount("capacity_gpus", capacity.total_gpus, "record the capacity"));
    RETURN_IF_ERROR(PutClusterCount("capacity_allocatable_gpus", capacity.allocatable_gpus,
                                    "record the allocatable GPUs"));
    ASSIGN_OR_RETURN(
        sqlite3_stmt * types,
        Cached("INSERT OR REPLACE INTO cluster (key, value) VALUES ('capacity_gpu_types', ?)"));
    Bind(types, 1, GpuTypesToJson(capacity.gpu_types));
    RETURN_IF_ERROR(Run(types, "record the capacity's GPU types"));
    if (capacity.slots.empty()) {
      ASSIGN_OR_RETURN(sqlite3_stmt * drop,
                       Cached("DELETE FROM cluster WHERE key = 'capacity_slots'"));
      return Run(drop, "record the capacity's slots");
    }
    ASSIGN_OR_RETURN(
        sqlite3_stmt * slots,
        Cached("INSERT OR REPLACE INTO cluster (key, value) VALUES ('capacity_slots', ?)"));
    Bind(slots, 1, SlotsToText(capacity.slots));
    return Run(slots, "record the capacity's slots");
  }

  absl::Status DeleteJobInTransaction(std::string_view job_id, uint64_t last_generation)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const char* sql :
         {"DELETE FROM jobs WHERE job_id = ?", "DELETE FROM recommendations WHERE job_id = ?",
          "DELETE FROM measurements WHERE job_id = ?"}) {
      ASSIGN_OR_RETURN(sqlite3_stmt * del, Cached(sql));
      Bind(del, 1, job_id);
      RETURN_IF_ERROR(Run(del, "forget the job"));
    }
    if (last_generation == 0) return absl::OkStatus();
    ASSIGN_OR_RETURN(sqlite3_stmt * keep, Cached("INSERT OR REPLACE INTO retired_generations "
                                                 "(job_id, generation) VALUES (?, ?)"));
    Bind(keep, 1, job_id);
    sqlite3_bind_int64(keep, 2, static_cast<int64_t>(last_generation));
    return Run(keep, "keep the job's last generation");
  }

  absl::Status PutRecommendationsInTransaction(std::span<const Recommendation> recs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ASSIGN_OR_RETURN(sqlite3_stmt * put, Cached("INSERT OR REPLACE INTO recommendations "
                                                "(job_id, record) VALUES (?, ?)"));
    ASSIGN_OR_RETURN(sqlite3_stmt * unretire,
                     Cached("DELETE FROM retired_generations WHERE job_id = ?"));
    for (const Recommendation& rec : recs) {
      Bind(put, 1, rec.job_id);
      Bind(put, 2, RecommendationToJson(rec));
      RETURN_IF_ERROR(Run(put, "record a recommendation"));
      Bind(unretire, 1, rec.job_id);
      RETURN_IF_ERROR(Run(unretire, "record a recommendation"));
    }
    return absl::OkStatus();
  }

  absl::Status PutMeasurementsInTransaction(std::span<const StoredMeasurements> jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Only for jobs still kept: a checkpoint that raced with a
    // deregistration must not put the job's measurements back (a job
    // registered again under that id would inherit them).
    ASSIGN_OR_RETURN(
        sqlite3_stmt * put,
        Cached("INSERT OR REPLACE INTO measurements (job_id, record, policy_memory) "
               "SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM jobs WHERE job_id = ?1)"));
    for (const StoredMeasurements& job : jobs) {
      Bind(put, 1, job.job_id);
      Bind(put, 2, MeasurementsToJson(job.sizes));
      Bind(put, 3, PolicyMemoryToJson(job));
      RETURN_IF_ERROR(Run(put, "record measurements"));
    }
    return absl::OkStatus();
  }

  // A count kept in the cluster table under `key` (a literal); nullopt
  // when the file has no such row.
  absl::StatusOr<std::optional<uint32_t>> ClusterCount(std::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ASSIGN_OR_RETURN(Statement get,
                     Prepare(absl::StrFormat("SELECT value FROM cluster WHERE key = '%s'", key)));
    if (sqlite3_step(get.get()) != SQLITE_ROW) return std::nullopt;
    return static_cast<uint32_t>(sqlite3_column_int64(get.get(), 0));
  }

  absl::Status PutClusterCount(std::string_view key, uint32_t count, std::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ASSIGN_OR_RETURN(sqlite3_stmt * put,
                     Cached(absl::StrFormat(
                         "INSERT OR REPLACE INTO cluster (key, value) VALUES ('%s', ?)", key)));
    sqlite3_bind_int64(put, 1, count);
    return Run(put, what);
  }

  absl::StatusOr<Statement> Prepare(std::string_view sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v2(db_.get(), sql.data(), static_cast<int>(sql.size()), &statement,
                           nullptr) != SQLITE_OK) {
      return Failed(absl::StrFormat("prepare \"%s\"", sql));
    }
    return Statement(statement);
  }

  // A write statement, prepared once per connection and kept: preparing
  // cost as much as the insert itself, once per change of a group commit.
  // Run resets it after each use.
  absl::StatusOr<sqlite3_stmt*> Cached(std::string_view sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = statements_.find(absl::string_view(sql.data(), sql.size()));
    if (it != statements_.end()) return it->second.get();
    sqlite3_stmt* statement = nullptr;
    if (sqlite3_prepare_v3(db_.get(), sql.data(), static_cast<int>(sql.size()),
                           SQLITE_PREPARE_PERSISTENT, &statement, nullptr) != SQLITE_OK) {
      return Failed(absl::StrFormat("prepare \"%s\"", sql));
    }
    statements_.emplace(std::string(sql), Statement(statement));
    return statement;
  }

  static void Bind(sqlite3_stmt* statement, int index, std::string_view text) {
    sqlite3_bind_text(statement, index, text.data(), static_cast<int>(text.size()),
                      SQLITE_TRANSIENT);
  }

  static std::string Text(sqlite3_stmt* statement, int column) {
    const unsigned char* text = sqlite3_column_text(statement, column);
    return text == nullptr ? std::string()
                           : std::string(reinterpret_cast<const char*>(text),
                                         sqlite3_column_bytes(statement, column));
  }

  // Steps a statement that returns no rows, and resets it for reuse.
  absl::Status Run(sqlite3_stmt* statement, std::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int rc = sqlite3_step(statement);
    sqlite3_reset(statement);
    sqlite3_clear_bindings(statement);
    if (rc != SQLITE_DONE) return Failed(what);
    return absl::OkStatus();
  }

  absl::Status Exec(const std::string& sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (sqlite3_exec(db_.get(), sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
      return Failed(absl::StrFormat("run \"%s\"", sql.substr(0, 60)));
    }
    return absl::OkStatus();
  }

  // The connection's last error, naming the file and what was attempted. A
  // file that is not a database or is damaged says what to do about it.
  absl::Status Failed(std::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int code = sqlite3_extended_errcode(db_.get());
    const std::string message = sqlite3_errmsg(db_.get());
    if ((code & 0xff) == SQLITE_BUSY || (code & 0xff) == SQLITE_LOCKED) return InUse();
    if ((code & 0xff) == SQLITE_NOTADB || (code & 0xff) == SQLITE_CORRUPT) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "state file %s is not a usable SQLite database (%s); restore it from a backup, or "
          "move it aside to start with no state",
          path_, message));
    }
    return absl::UnavailableError(
        absl::StrFormat("state file %s: could not %s: %s", path_, what, message));
  }

  absl::Status InUse() const {
    return absl::FailedPreconditionError(absl::StrFormat(
        "state file %s is in use by another process (another rescaled?); give each rescaled "
        "its own file",
        path_));
  }

  absl::Status Corrupt(std::string_view what, const absl::Status& status) const {
    return absl::FailedPreconditionError(absl::StrFormat(
        "state file %s: %s cannot be read (%s); restore the file from a backup, or move it "
        "aside to start with no state",
        path_, what, status.message()));
  }

  const std::string path_;
  // One transaction at a time on the connection: the engine writes from
  // its calls and from the plan thread (checkpoints).
  Mutex mu_;
  const std::unique_ptr<LockFile> lock_;  // closed after db_
  std::unique_ptr<sqlite3, DbCloser> db_ ABSL_GUARDED_BY(mu_);
  // Cached's statements, finalized before db_ closes (declared after it).
  absl::flat_hash_map<std::string, Statement> statements_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> OpenSqliteStateStore(const std::string& path) {
  // The lock first: the checks in Init would otherwise race another
  // rescaled starting on the same file.
  const std::string lock_path = path + ".lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot open state file %s: cannot create its lock file %s: %s; check "
                        "that its directory exists and is writable",
                        path, lock_path, std::strerror(errno)));
  }
  auto lock = std::make_unique<LockFile>(fd);
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "state file %s is in use by another process (another rescaled?), which holds %s; give "
        "each rescaled its own file",
        path, lock_path));
  }
  sqlite3* raw = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::unique_ptr<sqlite3, DbCloser> db(raw);
  if (rc != SQLITE_OK) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot open state file %s: %s; check that its directory exists and is writable", path,
        raw != nullptr ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  auto store = std::make_unique<SqliteStateStore>(path, std::move(lock), std::move(db));
  RETURN_IF_ERROR(store->Init());
  return store;
}

}  // namespace rescale::state_internal
