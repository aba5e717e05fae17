// SampleSender: rescale-agent's reliable path from parsed steps to rescaled.
//
// Samples wait in a bounded buffer until the server acknowledges the batch
// that carried them; a failed send leaves them in place and is retried after
// an exponential backoff with jitter. A batch whose answer was lost may
// already have been stored: resending it is safe because every sample the
// agent sends carries a `step` when the log has one, and rescaled stores at
// most one sample per pod and step (IngestSummary.duplicates counts the
// rest). So nothing is lost while the buffer has room, and nothing is
// counted twice. When the buffer is full the oldest sample not in flight is
// dropped and counted.
//
// One RPC per batch (MetricsService.ReportSamples): a unary call's response
// is the acknowledgement of exactly that batch, which a client stream (one
// summary at the end) cannot give.
//
// Time and randomness are injected (Clock, uniform source), and the send
// decision is split from waiting: tests drive MaybeSend() with a
// ManualClock; Run() adds the waiting for the binary.
//
// Thread safety: Add, Close and the accessors may be called from any
// thread; MaybeSend and Run from one sender thread at a time.
#ifndef RESCALE_CLIENT_AGENT_SENDER_H_
#define RESCALE_CLIENT_AGENT_SENDER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/common/backoff.h"
#include "client/common/server_list.h"
#include "rescale/clock.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::agent {

// What the server said about one batch.
struct BatchAck {
  uint64_t accepted = 0;
  uint64_t rejected = 0;
  uint64_t duplicates = 0;
  std::string first_rejection;  // reason of the first rejected sample, if any
};

// Sends one batch. Implementations: GrpcTransport (the real one); tests wrap
// it to lose answers or fail before sending.
class SampleTransport {
 public:
  virtual ~SampleTransport() = default;
  // The server's answer, or the RPC's error. Called from the sender thread.
  virtual absl::StatusOr<BatchAck> Send(const v1::SampleBatch& batch) = 0;
};

// MetricsService.ReportSamples over a channel, with a per-call deadline.
// Given several rescaled replicas (high availability), it sends to the
// leader: a batch a follower refuses (UNAVAILABLE, naming the leader) or
// that reaches no server fails as usual, is resent after the backoff, and
// goes to the leader named (or the next replica) then.
class GrpcTransport final : public SampleTransport {
 public:
  GrpcTransport(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout);
  GrpcTransport(std::shared_ptr<client::ServerList> servers, absl::Duration timeout);
  absl::StatusOr<BatchAck> Send(const v1::SampleBatch& batch) override;

 private:
  const std::shared_ptr<client::ServerList> servers_;
  const absl::Duration timeout_;
};

struct SenderOptions {
  // Batch-level fields of every batch (the samples leave them empty).
  std::string job_id;
  std::string pod;
  uint32_t world_size = 0;
  // The GPU type the pod runs on (SampleBatch.gpu_type); "" = not said.
  std::string gpu_type;
  // Samples per RPC at most.
  size_t max_batch = 500;
  // A partial batch is sent once its oldest sample has waited this long.
  absl::Duration flush_interval = absl::Seconds(2);
  // Unacknowledged samples kept at most; beyond, the oldest not in flight
  // is dropped (counted in SenderStats::dropped).
  size_t buffer_capacity = 100'000;
  // Backoff after the n-th consecutive failure: client::Backoff's schedule,
  // doubling from initial_backoff up to max_backoff, equal jitter (a
  // uniformly random delay in [d/2, d]; see client/common/backoff.h).
  absl::Duration initial_backoff = absl::Milliseconds(200);
  absl::Duration max_backoff = absl::Seconds(30);
};

// One measured step, stamped when its line was read.
struct AgentSample {
  double seconds = 0;
  std::optional<uint64_t> step;
  uint32_t batch_size = 0;  // 0 = the job's local_batch_size
  absl::Time at;
};

struct SenderStats {
  uint64_t queued = 0;       // samples given to Add
  uint64_t sent = 0;         // samples put on the wire, resends included
  uint64_t acked = 0;        // samples in batches the server answered
  uint64_t accepted = 0;     // ... and stored
  uint64_t duplicates = 0;   // ... and found already stored (resends)
  uint64_t rejected = 0;     // ... and refused as invalid (logged)
  uint64_t dropped = 0;      // removed unsent because the buffer was full
  uint64_t abandoned = 0;    // refused for good by the server (permanent RPC error)
  uint64_t failed_rpcs = 0;  // failed attempts, each retried or abandoned
  uint64_t pending = 0;      // still unacknowledged
};

class SampleSender {
 public:
  // `transport` and `clock` must outlive the sender. `uniform01` returns
  // values in [0, 1) for the jitter; null = a seeded generator.
  SampleSender(SenderOptions options, SampleTransport* transport, Clock* clock,
               std::function<double()> uniform01 = nullptr);

  // Queues one sample; never blocks on the network.
  void Add(const AgentSample& sample);
  // No more samples will come: Run drains the buffer and returns.
  void Close();

  // Sends one batch if one is due at the clock's now (full batch, flush
  // interval passed, or closed) and no backoff is pending. Returns whether
  // it sent (successfully or not).
  bool MaybeSend();
  // When MaybeSend may next have work: now if a batch is due, the end of
  // the backoff, the flush deadline of the oldest sample, or InfiniteFuture
  // when the buffer is empty.
  absl::Time NextAttempt() const;

  // Sends until Close was called and the buffer is empty, or until
  // `drain_timeout` has passed after Close (the rest stays pending).
  // Waits on a condition variable against the real time; for the binary.
  void Run(absl::Duration drain_timeout);

  SenderStats stats() const;
  // The last send error, OK after a success.
  absl::Status last_error() const;

 private:
  bool DueLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Time NextAttemptLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SenderOptions options_;
  SampleTransport* const transport_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;  // Add (first or batch-filling sample) and Close signal Run
  // Unacknowledged samples, oldest first; the first in_flight_ are in the
  // batch being sent and are never dropped.
  std::deque<AgentSample> buffer_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  // Its attempts() are the consecutive failed sends.
  client::Backoff backoff_ ABSL_GUARDED_BY(mu_);
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  SenderStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  uint64_t rejections_logged_ ABSL_GUARDED_BY(mu_) = 0;
};

// World size for the samples: `flag` when positive, else the environment
// variable WORLD_SIZE, else PET_NNODES when it is one number (or "n:n").
// PET_NNODES "min:max" with min < max is an elastic range, not the current
// size: that, and nothing set, is INVALID_ARGUMENT naming --world-size.
// `getenv` is injected for tests (null = std::getenv).
absl::StatusOr<uint32_t> ResolveWorldSize(int64_t flag,
                                          const std::function<const char*(const char*)>& getenv);

// GPU type for the batches: `flag` when non-empty, else the environment
// variable RESCALE_GPU_TYPE, else "" (not said: the server keeps the job's
// one curve). A value that is not a GPU type name (rescale/names.h) is
// INVALID_ARGUMENT naming --gpu-type or RESCALE_GPU_TYPE, whichever gave it.
// `getenv` is injected for tests (null = std::getenv).
absl::StatusOr<std::string> ResolveGpuType(std::string_view flag,
                                           const std::function<const char*(const char*)>& getenv);

}  // namespace rescale::agent

#endif  // RESCALE_CLIENT_AGENT_SENDER_H_
