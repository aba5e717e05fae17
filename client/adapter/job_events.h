// Kubernetes Events for the changes rescale-adapter applies, so that
// `kubectl describe` on a job shows why it was resized, suspended or
// resumed:
//
//   JobEventBody      the events.k8s.io/v1 Event for one change;
//   EventRateLimiter  a token bucket per job (a burst, then one Event per
//                     interval), on an injected Clock;
//   JobEventRecorder  queues Events and POSTs them on its own thread.
//
// Events are best-effort, as the API conventions say of them: a POST that
// fails is logged and counted, never retried, and never blocks or fails
// the apply that caused it (Record only queues). Events the limiter holds
// back, or that find the queue full, are counted too.
//
// The Event (events.k8s.io/v1, POST /apis/events.k8s.io/v1/namespaces/{ns}/
// events) as the API server validates a new one: eventTime (MicroTime),
// reportingController and reportingInstance (at most 128 characters),
// action and reason (machine-readable, at most 128), note (at most 1 KiB),
// type Normal, regarding = the job (apiVersion, kind, namespace, name, uid,
// resourceVersion), in the job's namespace; metadata.generateName lets the
// server pick a unique name.
//
// Thread safety: JobEventRecorder's methods may be called from any thread;
// Stop() joins its thread and drops what is still queued.
#ifndef RESCALE_CLIENT_ADAPTER_JOB_EVENTS_H_
#define RESCALE_CLIENT_ADAPTER_JOB_EVENTS_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/adapter/kube_client.h"
#include "client/adapter/pytorchjob.h"
#include "rescale/clock.h"

namespace rescale::adapter {

// What an applied recommendation changed on a job.
enum class JobChange {
  kRescaled,   // Worker replicas changed (the job stays running)
  kSuspended,  // it was running and is now suspended
  kResumed,    // it was suspended and runs again (perhaps at a new size)
  // Suspended to move to another GPU type; the adapter resumes it there
  // once its pods are gone (Adapter::ResumeMovedJobs).
  kMoved,
  // A Kueue job (client/adapter/kueue.h) Kueue has not admitted: its
  // recommendation waits for Kueue, which alone resumes it.
  kWaitingForKueue,
};
// The Event's reason ("Rescaled", "Suspended", "Resumed", "Moved",
// "WaitingForKueue") and action ("Rescale", "Suspend", "Resume", "Move",
// "Wait").
const char* EventReason(JobChange change);
const char* EventAction(JobChange change);

inline constexpr char kEventsApiVersion[] = "events.k8s.io/v1";
inline constexpr char kReportingController[] = "rescale.io/rescale-adapter";
// The API server's limits on a new Event's fields.
inline constexpr size_t kMaxEventNoteBytes = 1024;
inline constexpr size_t kMaxEventFieldLength = 128;

struct JobEventOptions {
  // Who reports: the adapter's pod name (main: $POD_NAME, else the host
  // name). Required by the API server; empty here = "rescale-adapter".
  std::string reporting_instance;
  // Per job: up to `burst` Events at once, then one more per `interval`.
  // burst 0 = no Events at all.
  int burst = 3;
  absl::Duration interval = absl::Seconds(30);
  // Events waiting for their POST; more are dropped (and counted).
  size_t max_queued = 256;
  // Time of eventTime and of the rate limit; null = the real clock.
  Clock* clock = nullptr;
};

// "2023-11-14T22:13:20.000000Z": a metav1.MicroTime, RFC 3339 in UTC with
// microseconds.
std::string MicroTime(absl::Time time);

// The Event for `change` to `job`, whose object is now at
// `resource_version`. `note` is made a valid string of at most 1 KiB
// (SanitizeText).
nlohmann::json JobEventBody(const JobInfo& job, const std::string& resource_version,
                            JobChange change, const std::string& note, absl::Time at,
                            const std::string& reporting_instance);

// A token bucket per key: `burst` Events at once, then one more per
// `interval`, kept as a theoretical arrival time (GCRA) so that time is
// exact integer arithmetic, not accumulated fractions of a token. Not
// thread-safe (JobEventRecorder locks).
class EventRateLimiter {
 public:
  EventRateLimiter(int burst, absl::Duration interval) : burst_(burst), interval_(interval) {}
  // Takes a token for `key` at `now`; false when there is none.
  bool Allow(const std::string& key, absl::Time now);
  // Forgets `key` (its job is gone), so the map does not grow forever.
  void Forget(const std::string& key) { next_free_.erase(key); }

 private:
  const int burst_;
  const absl::Duration interval_;
  // When the key's bucket is full again: each Event allowed moves it one
  // interval on; an Event is allowed while it stays within burst
  // intervals of now.
  std::map<std::string, absl::Time> next_free_;
};

class JobEventRecorder {
 public:
  enum class Outcome { kRecorded, kFailed, kRateLimited, kDropped };
  // Told of every Event's outcome, on the caller's thread (kRateLimited,
  // kDropped) or the recorder's (kRecorded, kFailed); `detail` is the
  // Event's reason, or the error. Must not block.
  using OutcomeCallback =
      std::function<void(Outcome outcome, const std::string& job_id, const std::string& detail)>;

  // `kube` must outlive the recorder.
  JobEventRecorder(JobEventOptions options, KubeClient* kube, OutcomeCallback on_outcome);
  ~JobEventRecorder();
  JobEventRecorder(const JobEventRecorder&) = delete;
  JobEventRecorder& operator=(const JobEventRecorder&) = delete;

  // Starts the thread that POSTs. Call once.
  void Start();
  // Joins it; Events still queued are dropped. Idempotent.
  void Stop();

  // Queues the Event for `change` to `job` (see JobEventBody) unless the
  // job's rate limit holds it back. Never blocks on the API server.
  void Record(const JobInfo& job, const std::string& resource_version, JobChange change,
              const std::string& note);
  // The job is gone: forget its rate limit.
  void Forget(const std::string& job_id);

 private:
  struct Pending {
    std::string job_id;
    std::string path;
    std::string reason;
    nlohmann::json body;
  };
  void Run();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }

  const JobEventOptions options_;
  KubeClient* const kube_;
  Clock* const clock_;
  const OutcomeCallback on_outcome_;

  absl::Mutex mu_;
  EventRateLimiter limiter_ ABSL_GUARDED_BY(mu_);
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace rescale::adapter

#endif  // RESCALE_CLIENT_ADAPTER_JOB_EVENTS_H_
