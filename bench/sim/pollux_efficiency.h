// Statistical efficiency in the simulator, as Pollux's simulator models it
// (petuum/adaptdl osdi21-artifact, simulator/applications.py and
// simulator.py): each measured application's validation traces
// (tests/data/pollux/APP/validation-B.csv, one file per total batch B, one
// row per epoch: progress, iteration, metric, grad_sqr, grad_var) give the
// gradient statistics a job has at each point of its training, and so how
// much progress a step at total batch M makes.
//
// What is taken from the traces, exactly as Pollux's Application does:
//  * M0, the initial batch, is the smallest B; the largest B is the largest
//    total batch a job may use.
//  * Progress is counted in iterations at M0 (so progress x M0 is samples
//    at M0). Epoch e (0-based) ends at the least, over the files, of row
//    e's progress; the job ends at the last epoch's end (TARGET; every app
//    has target_metric None, so completion is "finish the trace").
//    TARGET x M0: bert 177,288; cifar10 5,000,052; deepspeech2 570,720;
//    imagenet 115,305,119; ncf 49,708,544; yolov3 827,552 samples.
//  * During epoch e the statistics are row e's, linear in the total batch M
//    between the two files around M (not in progress).
//  * A step at M advances progress by s x EFF(M), s = M / M0; EFF is
//    rescale::StatisticalEfficiency (AdaptDL's formula) of those
//    statistics. grad_var is AdaptDL's, the variance at M0.
// The simulator runs a job's work (JobSpec.total_samples' basis) as samples
// at M0 and maps its fraction done onto the trace's progress, so a job of
// a different length (rescale-sim generate) walks the same epochs.
#ifndef RESCALE_BENCH_SIM_POLLUX_EFFICIENCY_H_
#define RESCALE_BENCH_SIM_POLLUX_EFFICIENCY_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "rescale/goodput.h"

namespace rescale::sim {

class EfficiencyTrace {
 public:
  // Parses one application's validation files, (B, CSV text) in any order.
  // INVALID_ARGUMENT naming the file and line for malformed input.
  static absl::StatusOr<EfficiencyTrace> Parse(
      std::string_view app, const std::vector<std::pair<uint32_t, std::string_view>>& files);

  uint32_t initial_batch() const { return files_.front().batch; }  // M0
  uint32_t max_batch() const { return files_.back().batch; }
  size_t epochs() const { return boundaries_.size(); }
  // Progress (iterations at M0) at which the job is done.
  double target() const { return boundaries_.back(); }
  // Progress at which epoch `e` (0-based) ends.
  double boundary(size_t e) const { return boundaries_[e]; }
  // The epoch a job is in when `fraction` of its work is done.
  size_t EpochAt(double fraction) const;
  // The gradient statistics during `epoch` at total batch `batch`.
  GradientStats StatsAt(size_t epoch, double batch) const;
  // EFF(batch) during `epoch`, against M0.
  double Efficiency(size_t epoch, double batch) const;

 private:
  struct Row {
    double progress = 0;
    GradientStats stats;
  };
  struct File {
    uint32_t batch = 0;
    std::vector<Row> rows;
  };
  std::vector<File> files_;  // ascending batch
  std::vector<double> boundaries_;
};

// The embedded traces of `app` (parsed once, then cached; thread-safe).
// NOT_FOUND for an application without validation traces.
absl::StatusOr<const EfficiencyTrace*> LoadEfficiencyTrace(std::string_view app);

}  // namespace rescale::sim

#endif  // RESCALE_BENCH_SIM_POLLUX_EFFICIENCY_H_
