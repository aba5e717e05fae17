// Parallel simulation runs and the progress bar (see runner.h).
#include "bench/sim/runner.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

namespace rescale::sim {

std::vector<absl::StatusOr<SimulationResult>> RunSimulations(std::vector<SimulationTask> tasks,
                                                             const RunnerOptions& options) {
  const size_t count = tasks.size();
  std::vector<std::optional<absl::StatusOr<SimulationResult>>> slots(count);
  std::atomic<uint64_t> jobs_finished{0};
  uint64_t jobs_total = 0;
  for (SimulationTask& task : tasks) {
    task.options.jobs_finished = &jobs_finished;
    jobs_total += task.workload->jobs.size();
  }
  unsigned threads = options.threads != 0 ? options.threads : std::thread::hardware_concurrency();
  threads = static_cast<unsigned>(std::clamp<size_t>(threads, 1, std::max<size_t>(count, 1)));

  std::mutex mu;
  std::condition_variable done_cv;
  size_t next_task = 0;
  size_t runs_done = 0;
  auto worker = [&] {
    while (true) {
      size_t index = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (next_task == count) return;
        index = next_task++;
      }
      absl::StatusOr<SimulationResult> result =
          Simulate(*tasks[index].workload, tasks[index].options);
      {
        std::lock_guard<std::mutex> lock(mu);
        slots[index] = std::move(result);
        ++runs_done;
      }
      done_cv.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < threads; ++i) pool.emplace_back(worker);

  // The bar only paces its redraws with the wall clock; results never see it.
  const bool draw = options.progress && isatty(STDERR_FILENO) == 1;
  {
    std::unique_lock<std::mutex> lock(mu);
    while (runs_done < count) {
      done_cv.wait_for(lock, std::chrono::milliseconds(200));
      if (!draw) continue;
      const uint64_t finished = jobs_finished.load(std::memory_order_relaxed);
      const double fraction = jobs_total == 0 ? 1 : double(finished) / double(jobs_total);
      constexpr int kWidth = 40;
      const int filled = static_cast<int>(fraction * kWidth);
      std::fprintf(stderr, "\r[%s%s] %3.0f%%  %llu/%llu jobs, %zu/%zu runs",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, ' ').c_str(),
                   fraction * 100, static_cast<unsigned long long>(finished),
                   static_cast<unsigned long long>(jobs_total), runs_done, count);
      std::fflush(stderr);
    }
  }
  if (draw) {
    std::fprintf(stderr, "\r%*s\r", 80, "");
    std::fflush(stderr);
  }
  for (std::thread& t : pool) t.join();
  std::vector<absl::StatusOr<SimulationResult>> results;
  results.reserve(count);
  for (auto& slot : slots) results.push_back(*std::move(slot));
  return results;
}

}  // namespace rescale::sim
