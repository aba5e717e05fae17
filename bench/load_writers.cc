// rescale-load --writers N (see load_writers.h).
#include "bench/load_writers.h"

#include <grpcpp/create_channel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/latency.h"
#include "rescale/v1/rescale.grpc.pb.h"

namespace rescale::load {
namespace {

namespace v1 = rescale::v1;
using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

using rescale::bench::Quantile;

}  // namespace

int RunWriters(const WritersOptions& options) {
  if (options.writers < 1 || options.seconds <= 0 || options.read_rate <= 0) {
    std::fprintf(stderr, "rescale-load: --writers, --seconds and --read_rate must be positive\n");
    return 2;
  }
  // Job ids unique to this run, so it can be repeated against one server.
  const std::string run = std::to_string(std::chrono::system_clock::now().time_since_epoch() /
                                         std::chrono::milliseconds(1));
  std::atomic<bool> stop{false};
  std::atomic<bool> failed{false};
  std::vector<std::vector<double>> writes(options.writers);
  std::vector<std::thread> threads;
  const auto started = Clock::now();
  for (int w = 0; w < options.writers; ++w) {
    threads.emplace_back([&, w] {
      grpc::ChannelArguments args;
      args.SetInt("grpc.use_local_subchannel_pool", 1);  // a connection of its own
      auto jobs = v1::JobService::NewStub(
          grpc::CreateCustomChannel(options.server, grpc::InsecureChannelCredentials(), args));
      for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        grpc::ClientContext ctx;
        v1::RegisterJobRequest req;
        req.mutable_spec()->set_job_id(absl::StrCat("bench/w", run, "-", w, "-", i));
        req.mutable_spec()->set_min_replicas(1);
        req.mutable_spec()->set_max_replicas(8);
        v1::Job reply;
        const auto t0 = Clock::now();
        grpc::Status status = jobs->RegisterJob(&ctx, req, &reply);
        writes[w].push_back(Ms(Clock::now() - t0));
        if (!status.ok()) {
          std::fprintf(stderr, "rescale-load: RegisterJob: %s\n", status.error_message().c_str());
          failed = true;
          stop = true;
        }
      }
    });
  }
  // The reader, paced at read_rate, reads the first writer's first job.
  std::vector<double> reads;
  std::thread reader([&] {
    grpc::ChannelArguments args;
    args.SetInt("grpc.use_local_subchannel_pool", 1);
    auto jobs = v1::JobService::NewStub(
        grpc::CreateCustomChannel(options.server, grpc::InsecureChannelCredentials(), args));
    const auto period = std::chrono::duration<double>(1.0 / options.read_rate);
    auto next = Clock::now();
    while (!stop.load(std::memory_order_relaxed)) {
      next += std::chrono::duration_cast<Clock::duration>(period);
      std::this_thread::sleep_until(next);  // pacing, not synchronisation
      grpc::ClientContext ctx;
      v1::GetJobRequest req;
      req.set_job_id(absl::StrCat("bench/w", run, "-0-0"));
      v1::Job job;
      const auto t0 = Clock::now();
      (void)jobs->GetJob(&ctx, req, &job);
      reads.push_back(Ms(Clock::now() - t0));
    }
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(options.seconds));  // the window
  stop = true;
  for (std::thread& t : threads) t.join();
  reader.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
  std::vector<double> all;
  for (auto& w : writes) all.insert(all.end(), w.begin(), w.end());
  const double rate = static_cast<double>(all.size()) / elapsed;
  std::printf("%-8s %10s %10s %10s %12s %12s %12s\n", "WRITERS", "CALLS/S", "P50_MS", "P99_MS",
              "GET_P50_MS", "GET_P99_MS", "GET_MAX_MS");
  std::printf("%-8d %10.0f %10.3f %10.3f %12.3f %12.3f %12.3f\n", options.writers, rate,
              Quantile(all, 0.5), Quantile(all, 0.99), Quantile(reads, 0.5), Quantile(reads, 0.99),
              Quantile(reads, 1.0));
  return failed ? 1 : 0;
}

}  // namespace rescale::load
