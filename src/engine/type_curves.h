// A job's throughput on each GPU type of a mixed cluster: its own fit where
// it ran, and a prediction where it did not (Sia's bootstrapping, SOSP'23
// 3.1: the compute part scaled by how much faster the type is, the
// communication model carried over), with the band the guess deserves.
// TypeSpeeds learns "how much faster" from the jobs measured on two types.
// Values only: the plan pipeline builds them under its gate, and the views
// read copies.
#ifndef RESCALE_SRC_ENGINE_TYPE_CURVES_H_
#define RESCALE_SRC_ENGINE_TYPE_CURVES_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rescale/throughput_model.h"
#include "rescale/types.h"
#include "src/engine/job_entry.h"

namespace rescale::engine {

// Per ordered pair of types (a, b), the median over the jobs measured on
// both of samples/s on b over samples/s on a at one replica; and how b's
// interconnect compares with a's, within a node and across nodes.
class TypeSpeeds {
 public:
  // From each job's per-type fits (Fitted::by_type; jobs with fewer than two
  // types measured add nothing). `types` give the node sizes the sync
  // ratios need (a type not among them gets none).
  static TypeSpeeds Learn(std::span<const Fitted* const> fits, std::span<const GpuType> types = {});
  // How much faster `to` runs a job than `from` (nullopt: no job ran on both).
  std::optional<double> Ratio(std::string_view from, std::string_view to) const;

  // What to multiply a job's sync seconds on `from` by to get them on `to`
  // (ThroughputModel::OnOtherType's two scales): the median over the jobs
  // measured on both of their overhead over one replica on `to`, at the
  // sizes they ran there, over what their model on `from` says that
  // placement's sync costs. Within a node from the sizes that fit one node
  // of `to`; across nodes from the others, net of the within part. The
  // interconnects of two types differ by up to two orders of magnitude, and
  // within and across nodes by different amounts (docs/simulator.md,
  // "Predicting one type from another"). nullopt: no job to learn from.
  struct SyncRatios {
    std::optional<double> within, across;
  };
  SyncRatios Sync(std::string_view from, std::string_view to) const;
  // Per size n that jobs ran at on `to` (replicas packed on its nodes): the
  // median over the jobs measured on both of their overhead over one
  // replica at n on `to` over their overhead at n on `from` (measured
  // there, else their model's, on `from`'s nodes), from the jobs whose
  // overhead on `from` is at least kSizeSignalShare of their one-replica
  // step. The shape of a type's sync differs from another's by size, not
  // only by a factor: on Sia's RTX 2080 Ti nodes two GPUs already cost BERT
  // 0.8 of a step, on its T4s 0.04, and sixteen 2.4 against 3.0. Null: none
  // learned.
  const std::map<uint32_t, double>* SizeRatios(std::string_view from, std::string_view to) const;
  // Below this share of a job's one-replica step, its overhead at a size on
  // a type is too small to be scaled to another type size by size: a few
  // hundredths of a step, times the tens that separate two interconnects,
  // would be mostly noise (on Sia's A100s, overheads that small are the
  // rule).
  static constexpr double kSizeSignalShare = 0.2;
  // The node size of a type Learn was given (0: unknown).
  uint32_t GpusPerNode(std::string_view type) const;
  // Changes when any ratio does by more than a percent: what a kept plan
  // input is keyed by, so a new job measured on two types does not refit
  // every other job's typed curves for a ratio that barely moved. The size
  // ratios count in steps of 5% (and as one step below 0.01): a pair has
  // one per size, so percent steps would refit every typed curve (about
  // 11 us per job and type, BM_ModelOnType) on most new measurements.
  uint64_t Fingerprint() const;
  bool empty() const { return ratio_.empty(); }

 private:
  std::map<std::pair<std::string, std::string>, double, std::less<>> ratio_;
  std::map<std::pair<std::string, std::string>, SyncRatios, std::less<>> sync_;
  std::map<std::pair<std::string, std::string>, std::map<uint32_t, double>, std::less<>>
      size_ratio_;
  std::map<std::string, uint32_t, std::less<>> gpus_per_node_;
};

// Where a job's model on one type comes from.
enum class TypeCurveSource {
  kMeasured,     // its own fit there (at two sizes or more)
  kTransferred,  // measured there at one size; the rest from another type
  kPredicted,    // never measured there: another type's, scaled by TypeSpeeds
  kUnknown,      // no fit on any type (the caller's default curve applies)
};
std::string_view TypeCurveSourceName(TypeCurveSource source);

struct TypeModel {
  ThroughputModel model;
  TypeCurveSource source = TypeCurveSource::kUnknown;
  std::string from_type;  // the type a transferred or predicted model is of
};

// The job's model on `type` (see TypeCurveSource), its nodes of
// type.gpus_per_node GPUs. `options` are the job's (JobViews::ModelOptionsOf).
TypeModel ModelOnType(const Fitted& fitted, const GpuType& type, const TypeSpeeds& speeds,
                      ModelOptions options);

// Whether `spec` may run on the type named `name` (JobSpec::gpu_types).
bool AllowedOn(const JobSpec& spec, std::string_view name);

}  // namespace rescale::engine

#endif  // RESCALE_SRC_ENGINE_TYPE_CURVES_H_
