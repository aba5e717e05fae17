// The throughput model's fit (ThroughputModel::Fit in throughput_model.cc
// calls FitParameters): Gauss-Newton on the log residuals of step time, each
// step an exact non-negative least-squares solve over the supports of the
// five parameters, with the weak prior rows that keep unidentified
// parameters at the near-linear prior's shares.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "throughput_model_internal.h"

namespace rescale::throughput_internal {
namespace {

// Standard deviation of the prior rows, as a share of the reference step:
// weak, so identified parameters follow the data.
constexpr double kPriorShareSigma = 0.20;

// Solves gram[S,S] x = rhs[S] for the parameters in `support` (a bit mask)
// by Gaussian elimination with partial pivoting. False when singular.
bool SolveOnSupport(const Mat& gram, const Vec& rhs, unsigned support, Vec& x) {
  int index[kParams];
  int k = 0;
  for (int i = 0; i < kParams; ++i) {
    if (support & (1u << i)) index[k++] = i;
  }
  double a[kParams][kParams + 1];
  double scale = 0;
  for (int r = 0; r < k; ++r) {
    for (int c = 0; c < k; ++c) a[r][c] = gram[index[r]][index[c]];
    a[r][k] = rhs[index[r]];
    scale = std::max(scale, std::abs(a[r][r]));
  }
  if (!(scale > 0)) return false;
  for (int c = 0; c < k; ++c) {
    int pivot = c;
    for (int r = c + 1; r < k; ++r) {
      if (std::abs(a[r][c]) > std::abs(a[pivot][c])) pivot = r;
    }
    if (!(std::abs(a[pivot][c]) > 1e-12 * scale)) return false;
    if (pivot != c) {
      for (int j = 0; j <= k; ++j) std::swap(a[c][j], a[pivot][j]);
    }
    for (int r = 0; r < k; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int j = c; j <= k; ++j) a[r][j] -= f * a[c][j];
    }
  }
  x = Vec{};
  for (int r = 0; r < k; ++r) x[index[r]] = a[r][k] / a[r][r];
  return true;
}

// argmin over x >= 0 of x'Gx - 2 b'x. With 4 variables the exact answer is
// the best of the (at most 15) unconstrained solutions on a support that come
// out non-negative; enumeration in a fixed order keeps it deterministic.
// Only supports within `free` are tried: the other parameters stay 0.
Vec SolveNonNegative(const Mat& gram, const Vec& rhs, unsigned free) {
  Vec best = Vec{};
  double best_value = 0;  // value of x = 0
  for (unsigned support = 1; support < (1u << kParams); ++support) {
    if ((support & ~free) != 0) continue;
    Vec x;
    if (!SolveOnSupport(gram, rhs, support, x)) continue;
    if (std::any_of(x.begin(), x.end(), [](double v) { return v < 0; })) continue;
    Vec gx;
    for (int i = 0; i < kParams; ++i) gx[i] = Dot(gram[i], x);
    const double value = Dot(x, gx) - 2 * Dot(rhs, x);
    if (Finite(value) && value < best_value) {
      best_value = value;
      best = x;
    }
  }
  return best;
}

// The ridge rows of the prior: coefficients . params ~ 0 with this weight,
// i.e. sync_base ~ kPriorSyncBaseShare * compute and likewise the slope,
// node_sync and node_sync_per_colocated (the two cross-node rows apply only
// when some row spans nodes, see FitParameters).
struct PriorRow {
  Vec coefficients;
  double weight;
  bool cross_node;
};
constexpr double kPriorWeight = 1.0 / (kPriorShareSigma * kPriorShareSigma);
const std::array<PriorRow, 4> kPriorRows = {{
    {{-kPriorSyncBaseShare, 1.0, 0.0, 0.0, 0.0}, kPriorWeight, false},
    {{-kPriorSyncPerWorkerShare, 0.0, 1.0, 0.0, 0.0}, kPriorWeight, false},
    {{-kPriorNodeSyncShare, 0.0, 0.0, 1.0, 0.0}, kPriorWeight, true},
    {{-kPriorSyncPerWorkerShare, 0.0, 0.0, 0.0, 1.0}, kPriorWeight, true},
}};

}  // namespace

// Weighted squared log error of the rows plus the prior rows; +inf when a
// prediction is not positive.
double Objective(const std::vector<FitRow>& rows, const Vec& params) {
  double total = 0;
  for (const FitRow& row : rows) {
    const double predicted = Dot(RowBasis(row), params);
    if (!(predicted > 0)) return std::numeric_limits<double>::infinity();
    const double r = std::log(predicted / row.step);
    total += row.weight * r * r;
  }
  for (const PriorRow& prior : kPriorRows) {
    const double r = Dot(prior.coefficients, params);
    total += prior.weight * r * r;
  }
  return total;
}

// Minimises Objective over params >= lower (lower = {min compute, 0, 0, 0, 0}):
// Gauss-Newton on the log residuals, each step an exact NNLS in the excess
// over the lower bound.
Vec FitParameters(const std::vector<FitRow>& rows, const Vec& lower) {
  // When no row spans nodes, the cross-node parameters appear only in their
  // prior rows, whose minimum (zero residual) is prior share x compute for
  // any compute: solve the in-node law alone (7 supports, not 31) and set
  // them from it. Same optimum, and the default (node size unknown) case
  // stays as fast as the three-parameter model.
  const bool spans_nodes = std::any_of(rows.begin(), rows.end(), [](const FitRow& row) {
    return row.replicas >= 2 && row.where.nodes > 1;
  });
  constexpr unsigned kInNode = 0b00111;
  constexpr unsigned kAll = (1u << kParams) - 1;
  std::vector<double> linearised_at(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) linearised_at[i] = rows[i].step;
  Vec params = lower;
  double objective = std::numeric_limits<double>::infinity();
  for (int iteration = 0; iteration < kGaussNewtonSteps; ++iteration) {
    // log(b.p) ~= log(m) + (b.p - m)/m, so each row contributes the linear
    // residual (b/m).p - (1 + log(step/m)); with p = lower + excess.
    Mat gram{};
    Vec rhs{};
    auto accumulate = [&](const Vec& a, double target, double weight) {
      const double shifted = target - Dot(a, lower);
      for (int i = 0; i < kParams; ++i) {
        rhs[i] += weight * a[i] * shifted;
        for (int j = 0; j < kParams; ++j) gram[i][j] += weight * a[i] * a[j];
      }
    };
    for (size_t i = 0; i < rows.size(); ++i) {
      const double m = linearised_at[i];
      Vec a = RowBasis(rows[i]);
      for (double& v : a) v /= m;
      accumulate(a, 1.0 + std::log(rows[i].step / m), rows[i].weight);
    }
    for (const PriorRow& prior : kPriorRows) {
      // Without node-spanning rows the cross-node prior rows are met exactly
      // (below), so they add nothing.
      if (prior.cross_node && !spans_nodes) continue;
      accumulate(prior.coefficients, 0.0, prior.weight);
    }
    const Vec excess = SolveNonNegative(gram, rhs, spans_nodes ? kAll : kInNode);
    Vec proposal;
    for (int i = 0; i < kParams; ++i) proposal[i] = lower[i] + excess[i];
    if (!spans_nodes) {
      proposal[3] = kPriorNodeSyncShare * proposal[0];
      proposal[4] = kPriorSyncPerWorkerShare * proposal[0];
    }

    if (iteration == 0) {
      // Linearised at the observed values: the closed-form relative-error fit.
      params = proposal;
      objective = Objective(rows, params);
    } else {
      // Accept the step, or the largest halving of it, that lowers the true
      // objective; when none does, the fit has converged.
      bool improved = false;
      double step = 1.0;
      for (int halving = 0; halving <= kStepHalvings && !improved; ++halving, step *= 0.5) {
        Vec candidate;
        for (int i = 0; i < kParams; ++i)
          candidate[i] = params[i] + step * (proposal[i] - params[i]);
        const double value = Objective(rows, candidate);
        if (value < objective) {
          params = candidate;
          objective = value;
          improved = true;
        }
      }
      if (!improved) break;
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      linearised_at[i] = Dot(RowBasis(rows[i]), params);
    }
  }
  return params;
}

}  // namespace rescale::throughput_internal
