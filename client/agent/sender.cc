// SampleSender, GrpcTransport and ResolveWorldSize (see client/agent/sender.h for
// the delivery guarantees and the threading contract).
#include "client/agent/sender.h"

#include <grpcpp/client_context.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rescale/names.h"

namespace rescale::agent {
namespace {

// Errors that resending the same batch cannot fix: the batch is abandoned
// (counted) instead of blocking the buffer forever. Everything else —
// UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, auth while
// credentials rotate — is retried.
bool Permanent(absl::StatusCode code) {
  return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kUnimplemented;
}

// Logs the 1st, 10th, 100th... occurrence: loud enough to notice, bounded.
bool PowerOfTen(uint64_t n) {
  while (n >= 10 && n % 10 == 0) n /= 10;
  return n == 1;
}

}  // namespace

GrpcTransport::GrpcTransport(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
    : GrpcTransport(client::ServerList::Of(std::move(channel)), timeout) {}

GrpcTransport::GrpcTransport(std::shared_ptr<client::ServerList> servers, absl::Duration timeout)
    : servers_(std::move(servers)), timeout_(timeout) {}

absl::StatusOr<BatchAck> GrpcTransport::Send(const v1::SampleBatch& batch) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  v1::IngestSummary summary;
  const std::shared_ptr<grpc::Channel> channel = servers_->Current();
  grpc::Status status =
      v1::MetricsService::NewStub(channel)->ReportSamples(&context, batch, &summary);
  if (!status.ok()) {
    if (servers_->AfterFailure(channel, status, context)) {
      spdlog::info("sending samples to {} from now on", servers_->CurrentAddress());
    }
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("ReportSamples: ", status.error_message()));
  }
  BatchAck ack;
  ack.accepted = summary.accepted();
  ack.rejected = summary.rejected();
  ack.duplicates = summary.duplicates();
  if (summary.rejections_size() > 0) ack.first_rejection = summary.rejections(0).reason();
  return ack;
}

SampleSender::SampleSender(SenderOptions options, SampleTransport* transport, Clock* clock,
                           std::function<double()> uniform01)
    : options_(std::move(options)),
      transport_(transport),
      clock_(clock),
      backoff_(
          client::BackoffOptions{.initial = options_.initial_backoff, .max = options_.max_backoff},
          std::move(uniform01)) {}

void SampleSender::Add(const AgentSample& sample) {
  absl::MutexLock lock(&mu_);
  ++stats_.queued;
  buffer_.push_back(sample);
  if (buffer_.size() > options_.buffer_capacity && buffer_.size() > in_flight_) {
    // Oldest first, but never a sample of the batch in flight: its fate is
    // decided by the answer.
    buffer_.erase(buffer_.begin() + static_cast<std::ptrdiff_t>(in_flight_));
    ++stats_.dropped;
    if (PowerOfTen(stats_.dropped)) {
      spdlog::warn("buffer full ({} samples unacknowledged): dropped the oldest; {} dropped so far",
                   options_.buffer_capacity, stats_.dropped);
    }
  }
  if (buffer_.size() == 1 || buffer_.size() == options_.max_batch) wake_.Signal();
}

void SampleSender::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  wake_.Signal();
}

bool SampleSender::DueLocked(absl::Time now) const {
  return in_flight_ == 0 && !buffer_.empty() && NextAttemptLocked() <= now;
}

absl::Time SampleSender::NextAttemptLocked() const {
  if (buffer_.empty()) return absl::InfiniteFuture();
  const absl::Time flush = buffer_.size() >= options_.max_batch || closed_
                               ? absl::InfinitePast()
                               : buffer_.front().at + options_.flush_interval;
  return std::max(flush, retry_at_);
}

absl::Time SampleSender::NextAttempt() const {
  absl::MutexLock lock(&mu_);
  return NextAttemptLocked();
}

bool SampleSender::MaybeSend() {
  v1::SampleBatch batch;
  size_t n = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!DueLocked(clock_->Now())) return false;
    n = std::min(buffer_.size(), options_.max_batch);
    in_flight_ = n;
    batch.set_job_id(options_.job_id);
    batch.set_pod(options_.pod);
    batch.set_world_size(options_.world_size);
    batch.set_gpu_type(options_.gpu_type);
    batch.mutable_samples()->Reserve(static_cast<int>(n));
    for (size_t i = 0; i < n; ++i) {
      const AgentSample& s = buffer_[i];
      v1::StepSample* out = batch.add_samples();
      out->set_step_seconds(s.seconds);
      if (s.step) out->set_step(*s.step);
      out->set_batch_size(s.batch_size);
      out->set_timestamp_unix_nanos(absl::ToUnixNanos(s.at));
    }
    stats_.sent += n;
  }
  // Unlocked: Add keeps queueing (and may drop, but not these n) meanwhile.
  absl::StatusOr<BatchAck> ack = transport_->Send(batch);
  absl::MutexLock lock(&mu_);
  in_flight_ = 0;
  if (ack.ok()) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(n));
    stats_.acked += n;
    stats_.accepted += ack->accepted;
    stats_.duplicates += ack->duplicates;
    stats_.rejected += ack->rejected;
    if (ack->rejected > 0) {
      ++rejections_logged_;
      if (PowerOfTen(rejections_logged_)) {
        spdlog::warn("rescaled rejected {} of {} samples: {} ({} batches with rejections so far)",
                     ack->rejected, n, ack->first_rejection, rejections_logged_);
      }
    }
    if (backoff_.attempts() > 0) {
      spdlog::info("delivered again after {} failed attempts", backoff_.attempts());
    }
    backoff_.Reset();
    retry_at_ = absl::InfinitePast();
    last_error_ = absl::OkStatus();
    return true;
  }
  ++stats_.failed_rpcs;
  last_error_ = ack.status();
  if (Permanent(ack.status().code())) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(n));
    stats_.abandoned += n;
    spdlog::error("rescaled refused a batch of {} samples for good, abandoned: {}", n,
                  ack.status().ToString());
    return true;
  }
  const absl::Duration delay = backoff_.Next();
  retry_at_ = clock_->Now() + delay;
  if (PowerOfTen(static_cast<uint64_t>(backoff_.attempts()))) {
    spdlog::warn("sending {} samples failed ({} in a row), retrying in {}: {}", n,
                 backoff_.attempts(), absl::FormatDuration(delay), ack.status().ToString());
  }
  return true;
}

void SampleSender::Run(absl::Duration drain_timeout) {
  absl::Time drain_deadline = absl::InfiniteFuture();
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        const absl::Time now = clock_->Now();
        if (closed_ && drain_deadline == absl::InfiniteFuture())
          drain_deadline = now + drain_timeout;
        if (closed_ && buffer_.empty()) return;
        if (now >= drain_deadline) return;
        const absl::Time next = NextAttemptLocked();
        if (next <= now) break;
        wake_.WaitWithDeadline(&mu_, std::min(next, drain_deadline));
      }
    }
    MaybeSend();
  }
}

SenderStats SampleSender::stats() const {
  absl::MutexLock lock(&mu_);
  SenderStats out = stats_;
  out.pending = buffer_.size();
  return out;
}

absl::Status SampleSender::last_error() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

absl::StatusOr<uint32_t> ResolveWorldSize(int64_t flag,
                                          const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string_view {
    const char* value = getenv ? getenv(name) : std::getenv(name);
    return value == nullptr ? std::string_view() : std::string_view(value);
  };
  auto number = [](std::string_view text, uint32_t& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && out >= 1;
  };
  if (flag > 0) {
    if (flag > UINT32_MAX) return absl::InvalidArgumentError("--world-size is too large");
    return static_cast<uint32_t>(flag);
  }
  if (flag < 0) return absl::InvalidArgumentError("--world-size must be at least 1");
  uint32_t size = 0;
  if (std::string_view ws = env("WORLD_SIZE"); !ws.empty()) {
    if (number(ws, size)) return size;
    return absl::InvalidArgumentError(absl::StrCat(
        "WORLD_SIZE=\"", std::string(ws), "\" is not a positive integer; pass --world-size"));
  }
  if (std::string_view nnodes = env("PET_NNODES"); !nnodes.empty()) {
    const size_t colon = nnodes.find(':');
    if (colon == std::string_view::npos) {
      if (number(nnodes, size)) return size;
    } else {
      uint32_t lo = 0, hi = 0;
      if (number(nnodes.substr(0, colon), lo) && number(nnodes.substr(colon + 1), hi) && lo == hi) {
        return lo;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("PET_NNODES=\"", std::string(nnodes),
                       "\" is an elastic range, not the current world size; pass --world-size (or "
                       "set WORLD_SIZE)"));
    }
    return absl::InvalidArgumentError(absl::StrCat("PET_NNODES=\"", std::string(nnodes),
                                                   "\" is not a node count; pass --world-size"));
  }
  return absl::InvalidArgumentError(
      "no world size: pass --world-size or set WORLD_SIZE (or PET_NNODES) in the environment");
}

absl::StatusOr<std::string> ResolveGpuType(std::string_view flag,
                                           const std::function<const char*(const char*)>& getenv) {
  std::string_view source = "--gpu-type";
  std::string_view value = flag;
  if (value.empty()) {
    const char* env = getenv ? getenv("RESCALE_GPU_TYPE") : std::getenv("RESCALE_GPU_TYPE");
    if (env == nullptr || *env == '\0') return std::string();
    source = "RESCALE_GPU_TYPE";
    value = env;
  }
  // Checked here rather than left to the server: it would reject every
  // sample one by one, and the agent would stream on, measuring nothing.
  if (!IsGpuTypeName(value)) return absl::InvalidArgumentError(GpuTypeNameError(source, value));
  return std::string(value);
}

}  // namespace rescale::agent
