// The embedded validation traces of the six Pollux applications and the
// statistical efficiency read from them (see pollux_efficiency.h).
#include "bench/sim/pollux_efficiency.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "bench/sim/csv.h"
#include "bench/sim/embed.h"

RESCALE_SIM_EMBED(rescale_sim_bert_validation_12, "bert/validation-12.csv")
RESCALE_SIM_EMBED(rescale_sim_bert_validation_24, "bert/validation-24.csv")
RESCALE_SIM_EMBED(rescale_sim_bert_validation_48, "bert/validation-48.csv")
RESCALE_SIM_EMBED(rescale_sim_bert_validation_96, "bert/validation-96.csv")
RESCALE_SIM_EMBED(rescale_sim_bert_validation_192, "bert/validation-192.csv")
RESCALE_SIM_EMBED(rescale_sim_bert_validation_384, "bert/validation-384.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_validation_128, "cifar10/validation-128.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_validation_256, "cifar10/validation-256.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_validation_512, "cifar10/validation-512.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_validation_1024, "cifar10/validation-1024.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_validation_2048, "cifar10/validation-2048.csv")
RESCALE_SIM_EMBED(rescale_sim_cifar10_validation_4096, "cifar10/validation-4096.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_validation_20, "deepspeech2/validation-20.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_validation_40, "deepspeech2/validation-40.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_validation_80, "deepspeech2/validation-80.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_validation_160, "deepspeech2/validation-160.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_validation_320, "deepspeech2/validation-320.csv")
RESCALE_SIM_EMBED(rescale_sim_deepspeech2_validation_640, "deepspeech2/validation-640.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_validation_200, "imagenet/validation-200.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_validation_400, "imagenet/validation-400.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_validation_800, "imagenet/validation-800.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_validation_1600, "imagenet/validation-1600.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_validation_3200, "imagenet/validation-3200.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_validation_6400, "imagenet/validation-6400.csv")
RESCALE_SIM_EMBED(rescale_sim_imagenet_validation_12800, "imagenet/validation-12800.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_256, "ncf/validation-256.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_512, "ncf/validation-512.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_1024, "ncf/validation-1024.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_2048, "ncf/validation-2048.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_4096, "ncf/validation-4096.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_8192, "ncf/validation-8192.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_16384, "ncf/validation-16384.csv")
RESCALE_SIM_EMBED(rescale_sim_ncf_validation_32768, "ncf/validation-32768.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_validation_8, "yolov3/validation-8.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_validation_16, "yolov3/validation-16.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_validation_32, "yolov3/validation-32.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_validation_64, "yolov3/validation-64.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_validation_128, "yolov3/validation-128.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_validation_256, "yolov3/validation-256.csv")
RESCALE_SIM_EMBED(rescale_sim_yolov3_validation_512, "yolov3/validation-512.csv")

namespace rescale::sim {
namespace {

struct EmbeddedValidation {
  std::string_view app;
  uint32_t batch;
  const char* begin;
  const char* end;
};

const EmbeddedValidation kValidation[] = {
    {"bert", 12, rescale_sim_bert_validation_12_begin, rescale_sim_bert_validation_12_end},
    {"bert", 24, rescale_sim_bert_validation_24_begin, rescale_sim_bert_validation_24_end},
    {"bert", 48, rescale_sim_bert_validation_48_begin, rescale_sim_bert_validation_48_end},
    {"bert", 96, rescale_sim_bert_validation_96_begin, rescale_sim_bert_validation_96_end},
    {"bert", 192, rescale_sim_bert_validation_192_begin, rescale_sim_bert_validation_192_end},
    {"bert", 384, rescale_sim_bert_validation_384_begin, rescale_sim_bert_validation_384_end},
    {"cifar10", 128, rescale_sim_cifar10_validation_128_begin,
     rescale_sim_cifar10_validation_128_end},
    {"cifar10", 256, rescale_sim_cifar10_validation_256_begin,
     rescale_sim_cifar10_validation_256_end},
    {"cifar10", 512, rescale_sim_cifar10_validation_512_begin,
     rescale_sim_cifar10_validation_512_end},
    {"cifar10", 1024, rescale_sim_cifar10_validation_1024_begin,
     rescale_sim_cifar10_validation_1024_end},
    {"cifar10", 2048, rescale_sim_cifar10_validation_2048_begin,
     rescale_sim_cifar10_validation_2048_end},
    {"cifar10", 4096, rescale_sim_cifar10_validation_4096_begin,
     rescale_sim_cifar10_validation_4096_end},
    {"deepspeech2", 20, rescale_sim_deepspeech2_validation_20_begin,
     rescale_sim_deepspeech2_validation_20_end},
    {"deepspeech2", 40, rescale_sim_deepspeech2_validation_40_begin,
     rescale_sim_deepspeech2_validation_40_end},
    {"deepspeech2", 80, rescale_sim_deepspeech2_validation_80_begin,
     rescale_sim_deepspeech2_validation_80_end},
    {"deepspeech2", 160, rescale_sim_deepspeech2_validation_160_begin,
     rescale_sim_deepspeech2_validation_160_end},
    {"deepspeech2", 320, rescale_sim_deepspeech2_validation_320_begin,
     rescale_sim_deepspeech2_validation_320_end},
    {"deepspeech2", 640, rescale_sim_deepspeech2_validation_640_begin,
     rescale_sim_deepspeech2_validation_640_end},
    {"imagenet", 200, rescale_sim_imagenet_validation_200_begin,
     rescale_sim_imagenet_validation_200_end},
    {"imagenet", 400, rescale_sim_imagenet_validation_400_begin,
     rescale_sim_imagenet_validation_400_end},
    {"imagenet", 800, rescale_sim_imagenet_validation_800_begin,
     rescale_sim_imagenet_validation_800_end},
    {"imagenet", 1600, rescale_sim_imagenet_validation_1600_begin,
     rescale_sim_imagenet_validation_1600_end},
    {"imagenet", 3200, rescale_sim_imagenet_validation_3200_begin,
     rescale_sim_imagenet_validation_3200_end},
    {"imagenet", 6400, rescale_sim_imagenet_validation_6400_begin,
     rescale_sim_imagenet_validation_6400_end},
    {"imagenet", 12800, rescale_sim_imagenet_validation_12800_begin,
     rescale_sim_imagenet_validation_12800_end},
    {"ncf", 256, rescale_sim_ncf_validation_256_begin, rescale_sim_ncf_validation_256_end},
    {"ncf", 512, rescale_sim_ncf_validation_512_begin, rescale_sim_ncf_validation_512_end},
    {"ncf", 1024, rescale_sim_ncf_validation_1024_begin, rescale_sim_ncf_validation_1024_end},
    {"ncf", 2048, rescale_sim_ncf_validation_2048_begin, rescale_sim_ncf_validation_2048_end},
    {"ncf", 4096, rescale_sim_ncf_validation_4096_begin, rescale_sim_ncf_validation_4096_end},
    {"ncf", 8192, rescale_sim_ncf_validation_8192_begin, rescale_sim_ncf_validation_8192_end},
    {"ncf", 16384, rescale_sim_ncf_validation_16384_begin, rescale_sim_ncf_validation_16384_end},
    {"ncf", 32768, rescale_sim_ncf_validation_32768_begin, rescale_sim_ncf_validation_32768_end},
    {"yolov3", 8, rescale_sim_yolov3_validation_8_begin, rescale_sim_yolov3_validation_8_end},
    {"yolov3", 16, rescale_sim_yolov3_validation_16_begin, rescale_sim_yolov3_validation_16_end},
    {"yolov3", 32, rescale_sim_yolov3_validation_32_begin, rescale_sim_yolov3_validation_32_end},
    {"yolov3", 64, rescale_sim_yolov3_validation_64_begin, rescale_sim_yolov3_validation_64_end},
    {"yolov3", 128, rescale_sim_yolov3_validation_128_begin, rescale_sim_yolov3_validation_128_end},
    {"yolov3", 256, rescale_sim_yolov3_validation_256_begin, rescale_sim_yolov3_validation_256_end},
    {"yolov3", 512, rescale_sim_yolov3_validation_512_begin, rescale_sim_yolov3_validation_512_end},
};

absl::Status Malformed(std::string_view app, uint32_t batch, int line, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s/validation-%d.csv line %d: %s", app, batch, line, what));
}

}  // namespace

absl::StatusOr<EfficiencyTrace> EfficiencyTrace::Parse(
    std::string_view app, const std::vector<std::pair<uint32_t, std::string_view>>& files) {
  if (files.empty())
    return absl::InvalidArgumentError(absl::StrFormat("%s: no validation files", app));
  EfficiencyTrace trace;
  for (const auto& [batch, text] : files) {
    absl::StatusOr<CsvTable> table = ParseCsv(text);
    if (!table.ok()) return table.status();
    const std::optional<size_t> progress = table->Find("progress"), sqr = table->Find("grad_sqr"),
                                var = table->Find("grad_var");
    if (!progress || !sqr || !var)
      return Malformed(app, batch, 1, "needs the columns progress, grad_sqr and grad_var");
    File file;
    file.batch = batch;
    for (size_t r = 0; r < table->rows.size(); ++r) {
      const std::vector<std::string>& row = table->rows[r];
      Row parsed;
      if (row.size() <= std::max({*progress, *sqr, *var}) ||
          !absl::SimpleAtod(row[*progress], &parsed.progress) ||
          !absl::SimpleAtod(row[*sqr], &parsed.stats.sqr) ||
          !absl::SimpleAtod(row[*var], &parsed.stats.var) || !(parsed.progress > 0) ||
          !(parsed.stats.sqr >= 0) || !(parsed.stats.var >= 0) ||
          !std::isfinite(parsed.stats.sqr) || !std::isfinite(parsed.stats.var)) {
        return Malformed(app, batch, table->line_numbers[r],
                         "progress must be positive and the gradient statistics finite, >= 0");
      }
      file.rows.push_back(parsed);
    }
    if (file.rows.empty()) return Malformed(app, batch, 1, "no rows");
    trace.files_.push_back(std::move(file));
  }
  std::sort(trace.files_.begin(), trace.files_.end(),
            [](const File& a, const File& b) { return a.batch < b.batch; });
  // Pollux's Application: the epochs are the shortest file's rows, and the
  // progress at which epoch e ends is the least over the files of their
  // row e's (applications.py, get_progress).
  size_t epochs = trace.files_.front().rows.size();
  for (const File& f : trace.files_) epochs = std::min(epochs, f.rows.size());
  for (size_t e = 0; e < epochs; ++e) {
    double boundary = trace.files_.front().rows[e].progress;
    for (const File& f : trace.files_) boundary = std::min(boundary, f.rows[e].progress);
    if (!trace.boundaries_.empty() && !(boundary > trace.boundaries_.back()))
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: epoch boundaries must increase (epoch %d)", app, e + 1));
    trace.boundaries_.push_back(boundary);
  }
  return trace;
}

size_t EfficiencyTrace::EpochAt(double fraction) const {
  const double progress = std::max(0.0, fraction) * target();
  // Epochs completed: boundaries at or below the progress (the last epoch
  // stays the current one past the target).
  const size_t done = static_cast<size_t>(
      std::upper_bound(boundaries_.begin(), boundaries_.end(), progress) - boundaries_.begin());
  return std::min(done, boundaries_.size() - 1);
}

GradientStats EfficiencyTrace::StatsAt(size_t epoch, double batch) const {
  epoch = std::min(epoch, boundaries_.size() - 1);
  // Linear in the total batch between the two files around it
  // (get_grad_stats); outside their range, the nearest file (Pollux asserts
  // instead: its jobs never leave the range).
  if (batch <= files_.front().batch) return files_.front().rows[epoch].stats;
  if (batch >= files_.back().batch) return files_.back().rows[epoch].stats;
  auto hi = std::lower_bound(files_.begin(), files_.end(), batch,
                             [](const File& f, double b) { return f.batch < b; });
  if (hi->batch == batch) return hi->rows[epoch].stats;
  auto lo = std::prev(hi);
  const double t = (batch - lo->batch) / double(hi->batch - lo->batch);
  const GradientStats& a = lo->rows[epoch].stats;
  const GradientStats& b = hi->rows[epoch].stats;
  return {.sqr = a.sqr + t * (b.sqr - a.sqr), .var = a.var + t * (b.var - a.var)};
}

double EfficiencyTrace::Efficiency(size_t epoch, double batch) const {
  return StatisticalEfficiency(StatsAt(epoch, batch), initial_batch(), batch);
}

absl::StatusOr<const EfficiencyTrace*> LoadEfficiencyTrace(std::string_view app) {
  static std::mutex mu;
  static auto* cache = new std::map<std::string, EfficiencyTrace, std::less<>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache->find(app); it != cache->end()) return &it->second;
  std::vector<std::pair<uint32_t, std::string_view>> files;
  for (const EmbeddedValidation& e : kValidation) {
    if (e.app == app) files.emplace_back(e.batch, std::string_view(e.begin, e.end - e.begin));
  }
  if (files.empty())
    return absl::NotFoundError(absl::StrFormat("no validation traces for \"%s\"", app));
  absl::StatusOr<EfficiencyTrace> parsed = EfficiencyTrace::Parse(app, files);
  if (!parsed.ok()) return parsed.status();
  return &cache->emplace(std::string(app), *std::move(parsed)).first->second;
}

}  // namespace rescale::sim
