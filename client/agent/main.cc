// rescale-agent: streams one pod's step times from its training log to
// rescaled.
//
// Usage:
//   kubectl logs -f POD | rescale-agent --job NS/NAME --pod POD
//   rescale-agent --server rescaled:50051 --job NS/NAME --pod POD
//       --file /var/log/train.log --format kv --world-size 4
//       --gpu-type NVIDIA-A100-SXM4-40GB
// Formats: see client/agent/parser.h; delivery guarantees: client/agent/sender.h;
// file following: client/agent/source.h. The flag names (with dashes, hence CLI11
// rather than absl flags) are a public contract.
//
// Exit codes:
//   0  the input ended (EOF, or SIGINT/SIGTERM) and every sample read was
//      acknowledged by rescaled (stored, de-duplicated or rejected as invalid)
//   1  --file exists but could not be opened (a missing file is waited
//      for), or --ca-file could not be read
//   2  usage: bad flags, no world size, bad --format, a --gpu-type (or
//      RESCALE_GPU_TYPE) that is not a GPU type name
//   3  samples were lost: dropped from a full buffer, refused for good, or
//      still unacknowledged when --drain-timeout ran out
// On exit one line of statistics goes to stderr.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/agent/parser.h"
#include "client/agent/sender.h"
#include "client/agent/source.h"
#include "client/common/credentials.h"

namespace {

using rescale::agent::SenderOptions;

struct Flags {
  std::string server = "127.0.0.1:50051";
  std::string job;
  std::string pod;
  int64_t world_size = 0;
  std::string gpu_type;
  uint32_t batch_size = 0;
  std::string file;
  std::string format = "imagenet";
  bool from_start = false;
  size_t max_batch = SenderOptions().max_batch;
  double flush_interval = absl::ToDoubleSeconds(SenderOptions().flush_interval);
  size_t buffer = SenderOptions().buffer_capacity;
  double max_backoff = absl::ToDoubleSeconds(SenderOptions().max_backoff);
  double drain_timeout = 30;
  double rpc_timeout = 10;
  double poll_interval = 0.5;
  rescale::client::SecurityFlags security;
};

std::shared_ptr<rescale::client::ServerList> Connect(const Flags& flags) {
  auto connection =
      rescale::client::RescaledConnection::Create(flags.security, std::getenv("RESCALE_TOKEN"));
  if (!connection.ok()) {
    std::cerr << "rescale-agent: " << connection.status().message() << "\n";
    return nullptr;
  }
  auto servers = rescale::client::ServerList::Create(flags.server, *std::move(connection));
  if (!servers.ok()) {
    std::cerr << "rescale-agent: --server: " << servers.status().message() << "\n";
    return nullptr;
  }
  (*servers)->FindLeader();
  return *servers;
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken by one thread (sigwait), so the reader and sender
  // never see EINTR and shutdown is an ordinary Close(). Blocked first, so
  // every thread (gRPC's included) inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Flags flags;
  CLI::App app{"rescale-agent: stream one pod's training step times to rescaled"};
  app.add_option("--server", flags.server,
                 "rescaled address host:port; with high availability every replica's, "
                 "comma-separated (samples go to the leader)")
      ->envname("RESCALE_SERVER")
      ->capture_default_str();
  app.add_option("--job", flags.job, "job id, namespace/name")->required();
  app.add_option("--pod", flags.pod, "pod whose log this is")->envname("POD_NAME")->required();
  app.add_option(
      "--world-size", flags.world_size,
      "workers in the job; default: $WORLD_SIZE, else $PET_NNODES when not a min:max range");
  // Not CLI11's envname: ResolveGpuType reads RESCALE_GPU_TYPE, so an
  // invalid value is named by where it came from.
  app.add_option("--gpu-type", flags.gpu_type,
                 "GPU type the pod runs on, the node's nvidia.com/gpu.product label (e.g. "
                 "NVIDIA-A100-SXM4-40GB); default: $RESCALE_GPU_TYPE, else not said");
  app.add_option("--batch-size", flags.batch_size,
                 "samples per step on this pod, for lines that do not say; 0 = the job's "
                 "local_batch_size")
      ->capture_default_str();
  app.add_option("--file", flags.file, "follow this file (tail -f) instead of reading stdin");
  app.add_option("--format", flags.format, "imagenet, kv or regex:EXPR")->capture_default_str();
  app.add_flag("--from-start", flags.from_start,
               "with --file: read the file from its beginning, not from its end");
  app.add_option("--max-batch", flags.max_batch, "samples per RPC at most")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--flush-interval", flags.flush_interval,
                 "seconds a partial batch may wait before it is sent")
      ->capture_default_str();
  app.add_option("--buffer", flags.buffer,
                 "unacknowledged samples kept at most; beyond, the oldest are dropped")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--max-backoff", flags.max_backoff, "longest wait between retries, seconds")
      ->capture_default_str();
  app.add_option("--drain-timeout", flags.drain_timeout,
                 "seconds to keep delivering after the input ends")
      ->capture_default_str();
  app.add_option("--rpc-timeout", flags.rpc_timeout, "deadline of one RPC, seconds")
      ->capture_default_str();
  app.add_option("--poll-interval", flags.poll_interval,
                 "with --file: seconds between reads at its end")
      ->capture_default_str();
  rescale::client::AddSecurityFlags(app, flags.security);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }

  auto logger = spdlog::stderr_logger_mt("rescale-agent");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ rescale-agent: %v");
  spdlog::set_default_logger(logger);

  absl::StatusOr<uint32_t> world_size = rescale::agent::ResolveWorldSize(flags.world_size, nullptr);
  if (!world_size.ok()) {
    std::cerr << "rescale-agent: " << world_size.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::string> gpu_type = rescale::agent::ResolveGpuType(flags.gpu_type, nullptr);
  if (!gpu_type.ok()) {
    std::cerr << "rescale-agent: " << gpu_type.status().message() << "\n";
    return 2;
  }
  absl::StatusOr<std::unique_ptr<rescale::agent::LineParser>> parser =
      rescale::agent::MakeLineParser(flags.format);
  if (!parser.ok()) {
    std::cerr << "rescale-agent: " << parser.status().message() << "\n";
    return 2;
  }
  std::shared_ptr<rescale::client::ServerList> servers = Connect(flags);
  if (servers == nullptr) return 1;

  SenderOptions options;
  options.job_id = flags.job;
  options.pod = flags.pod;
  options.world_size = *world_size;
  options.gpu_type = *gpu_type;
  options.max_batch = flags.max_batch;
  options.flush_interval = absl::Seconds(flags.flush_interval);
  options.buffer_capacity = flags.buffer;
  options.max_backoff = absl::Seconds(flags.max_backoff);
  rescale::agent::GrpcTransport transport(servers, absl::Seconds(flags.rpc_timeout));
  rescale::agent::SampleSender sender(options, &transport, rescale::Clock::Real());
  rescale::agent::LineFeeder feeder(parser->get(), &sender, rescale::Clock::Real(),
                                    flags.batch_size);

  std::atomic<bool> stopping{false};
  std::atomic<int> exit_code{0};
  std::thread signal_thread([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info("signal {}: delivering what was read, then exiting", signal);
    stopping.store(true, std::memory_order_relaxed);
    sender.Close();
  });
  signal_thread.detach();  // may still wait in sigwait at exit

  std::thread reader([&] {
    if (flags.file.empty()) {
      std::string line;
      while (!stopping.load(std::memory_order_relaxed) && std::getline(std::cin, line))
        feeder.Feed(line);
    } else {
      rescale::agent::FileFollower follower(flags.file, flags.from_start);
      absl::Status first = follower.Poll([&](std::string_view line) { feeder.Feed(line); });
      if (absl::IsNotFound(first)) {
        spdlog::warn("{}; waiting for it", std::string(first.message()));
      }
      if (!first.ok() && !absl::IsNotFound(first)) {
        spdlog::error("{}", std::string(first.message()));
        exit_code.store(1);
      } else {
        while (!stopping.load(std::memory_order_relaxed)) {
          absl::SleepFor(absl::Seconds(flags.poll_interval));
          absl::Status polled = follower.Poll([&](std::string_view line) { feeder.Feed(line); });
          if (!polled.ok()) spdlog::debug("{}", std::string(polled.message()));
        }
      }
    }
    sender.Close();
  });

  sender.Run(absl::Seconds(flags.drain_timeout));
  // A reader blocked on stdin after a signal cannot be woken portably: the
  // process ends under it with _exit (no static destructors racing it).
  const bool reader_may_block = stopping.load() || exit_code.load() != 0;
  if (reader_may_block) {
    reader.detach();
  } else {
    reader.join();
  }

  const rescale::agent::SenderStats s = sender.stats();
  const rescale::agent::FeedStats f = feeder.stats();
  std::cerr << absl::StrFormat(
      "rescale-agent: lines_read=%d lines_parsed=%d samples_sent=%d acked=%d accepted=%d "
      "duplicates=%d rejected=%d dropped=%d abandoned=%d unacknowledged=%d failed_rpcs=%d\n",
      f.lines_read, f.lines_parsed, s.sent, s.acked, s.accepted, s.duplicates, s.rejected,
      s.dropped, s.abandoned, s.pending, s.failed_rpcs);
  int code = exit_code.load();
  if (code == 0 && (s.dropped > 0 || s.abandoned > 0 || s.pending > 0)) {
    if (s.pending > 0) {
      spdlog::error("{} samples still unacknowledged after --drain-timeout; last error: {}",
                    s.pending, sender.last_error().ToString());
    }
    code = 3;
  }
  if (reader_may_block) {
    spdlog::shutdown();
    std::cerr.flush();
    std::_Exit(code);
  }
  return code;
}
