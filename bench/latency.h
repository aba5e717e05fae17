// Quantile: the one rule the benchmarks and load generators report latency
// percentiles by (nearest rank over the sorted sample).
#ifndef RESCALE_BENCH_LATENCY_H_
#define RESCALE_BENCH_LATENCY_H_

#include <algorithm>
#include <vector>

namespace rescale::bench {

// Latencies in milliseconds; quantile q of them (0 when empty).
inline double Quantile(std::vector<double> ms, double q) {
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  const size_t index = std::min(ms.size() - 1, static_cast<size_t>(q * (ms.size() - 1) + 0.5));
  return ms[index];
}

}  // namespace rescale::bench

#endif  // RESCALE_BENCH_LATENCY_H_
