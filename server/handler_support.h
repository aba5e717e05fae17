// What gRPC handlers of rescaled share, between the rescale.v1 services
// (server/services.cc) and the KEDA external scaler (server/keda_scaler.cc):
// admit the caller (authenticate, authorise, audit a refusal), finish a
// unary call with a mapped status, tell ThreadSanitizer when gRPC hands a
// reactor to its own threads, and stream a recommendation Subscription
// (SubscriptionStreamReactor).
#ifndef RESCALE_SERVER_HANDLER_SUPPORT_H_
#define RESCALE_SERVER_HANDLER_SUPPORT_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "rescale/decision_engine.h"
#include "rescale/mutex.h"
#include "rescale/recommendation_board.h"
#include "server/auth.h"
#include "server/services.h"

namespace rescale::server {

// Finishes a unary call with `status`, mapped by ToGrpcStatus.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      const absl::Status& status);

// gRPC from Debian is not instrumented for ThreadSanitizer, so TSan cannot
// see that gRPC runs a reactor's callbacks, on its own threads, only after
// the method handler returned the reactor (the hand-off goes through atomics
// inside libgrpc). These state that hand-off to TSan: the constructor's end
// releases the reactor, each callback acquires it first. Everything else the
// callbacks share is under the reactor's std::mutex, which TSan sees. They
// are no-ops outside TSan builds.
void ReactorHandedToGrpc(void* reactor);
void ReactorCallbackFromGrpc(void* reactor);

// The caller of `context` if it may make this call, else the status that
// refuses it (UNAUTHENTICATED or PERMISSION_DENIED), which is audited
// whatever the method: refusals are what an audit is read for.
absl::StatusOr<std::shared_ptr<const Identity>> Admit(const CallSecurity& security,
                                                      grpc::CallbackServerContext* context,
                                                      Access access, absl::string_view method,
                                                      absl::string_view ns,
                                                      absl::string_view job = "");

// What a subscription stream does with one event.
enum class StreamStep {
  kWrite,   // write the message the event was translated to
  kSkip,    // nothing for this caller: take the next event
  kFinish,  // end the call with the status given
};

// Streams a Subscription as the messages `translate` makes of its events
// (WatchRecommendations writes each, StreamIsActive one per change of
// activity of one job).
//
// Events arrive on publishing threads, writes complete on gRPC threads, so the
// reactor's state sits behind `Gate::mu`. The subscription's ready callback
// holds a shared_ptr to the Gate, not to the reactor: OnDone clears
// Gate::reactor under the same mutex before deleting the reactor, so a late
// callback finds null instead of freed memory.
template <typename Message>
class SubscriptionStreamReactor final : public grpc::ServerWriteReactor<Message> {
 public:
  // Called under the reactor's lock, one event at a time; must not block.
  using Translate =
      std::function<StreamStep(const RecommendationEvent& event, Message* out, grpc::Status* end)>;

  SubscriptionStreamReactor(DecisionEngine& engine, std::shared_ptr<Subscription> subscription,
                            Translate translate)
      : engine_(engine),
        subscription_(std::move(subscription)),
        translate_(std::move(translate)),
        gate_(std::make_shared<Gate>()) {
    MutexLock lock(gate_->mu);
    gate_->reactor = this;
    subscription_->SetReadyCallback([gate = gate_] {
      MutexLock lock(gate->mu);
      if (gate->reactor == nullptr) return;
      // The reactor's gate_ is this gate: tell the analysis it is held.
      gate->reactor->gate_->mu.AssertHeld();
      gate->reactor->PumpLocked();
    });
    PumpLocked();
    ReactorHandedToGrpc(this);
  }

  void OnWriteDone(bool ok) override {
    ReactorCallbackFromGrpc(this);
    MutexLock lock(gate_->mu);
    writing_ = false;
    if (!ok) {  // the client is gone or the call was cancelled
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
      return;
    }
    PumpLocked();
  }

  void OnCancel() override {
    ReactorCallbackFromGrpc(this);
    MutexLock lock(gate_->mu);
    cancelled_ = true;
    // With a write in flight, OnWriteDone(false) follows and finishes.
    if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    ReactorCallbackFromGrpc(this);
    {
      MutexLock lock(gate_->mu);
      gate_->reactor = nullptr;
    }
    // Outside the gate: the board may call the ready callback under its own
    // lock, which takes the gate (lock order board -> gate).
    engine_.Unwatch(subscription_);
    delete this;
  }

 private:
  struct Gate {
    // rescale::Mutex (std::mutex), as in the core: Debian's Abseil is not
    // built with ThreadSanitizer, which would not see absl::Mutex's
    // synchronisation.
    Mutex mu;
    SubscriptionStreamReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_->mu) {
    while (!writing_ && !finished_) {
      if (cancelled_) {
        FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
        return;
      }
      RecommendationEvent event;
      switch (subscription_->Next(&event)) {
        case Subscription::Poll::kEvent: {
          out_.Clear();
          grpc::Status end;
          switch (translate_(event, &out_, &end)) {
            case StreamStep::kWrite:
              writing_ = true;
              this->StartWrite(&out_);
              return;
            case StreamStep::kSkip:
              continue;
            case StreamStep::kFinish:
              FinishLocked(end);
              return;
          }
          return;
        }
        case Subscription::Poll::kEmpty:
          return;  // the ready callback pumps again
        case Subscription::Poll::kClosed:
          FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                    "rescaled is shutting down; reconnect and watch again"));
          return;
      }
    }
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(gate_->mu) {
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
  }

  DecisionEngine& engine_;
  const std::shared_ptr<Subscription> subscription_;
  const Translate translate_;
  const std::shared_ptr<Gate> gate_;
  Message out_ ABSL_GUARDED_BY(gate_->mu);
  bool writing_ ABSL_GUARDED_BY(gate_->mu) = false;
  bool cancelled_ ABSL_GUARDED_BY(gate_->mu) = false;
  bool finished_ ABSL_GUARDED_BY(gate_->mu) = false;
};

// Finishes a server-streaming call that could not start.
template <typename Message>
class RejectedStreamReactor final : public grpc::ServerWriteReactor<Message> {
 public:
  explicit RejectedStreamReactor(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace rescale::server

#endif  // RESCALE_SERVER_HANDLER_SUPPORT_H_
