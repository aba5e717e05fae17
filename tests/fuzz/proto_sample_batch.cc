// Fuzz target: a rescale.v1.SampleBatch as agents send it to ReportSamples,
// from wire bytes to the metrics store: parse the proto, flatten it
// (server/convert.h FromProto), and ingest it into a MetricsStore, where
// each sample is validated. The batch's own job is registered first, so
// samples reach the per-job checks and the statistics.
//
// Invariants checked: every sample is counted exactly once (accepted +
// rejected + duplicates = samples), a rejection names its sample's index
// and a reason, and the statistics of the job can be read afterwards.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "rescale/metrics_store.h"
#include "rescale/types.h"
#include "rescale/v1/rescale.pb.h"
#include "server/convert.h"

// protobuf logs every string field that is not UTF-8 (a parse failure the
// target expects); millions of such lines would drown the fuzzer's output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rescale::v1::SampleBatch batch;
  if (!batch.ParseFromArray(data, static_cast<int>(size))) return 0;

  const std::vector<rescale::StepSample> samples = rescale::server::FromProto(batch);
  if (samples.size() != static_cast<size_t>(batch.samples_size())) std::abort();

  rescale::MetricsStore store;
  const absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  (void)store.AddJob(batch.job_id(), /*max_replicas=*/64, /*local_batch_size=*/32);
  const rescale::IngestResult result = store.Ingest(samples, now);
  if (result.accepted + result.rejected + result.duplicates != samples.size()) std::abort();
  for (const rescale::SampleRejection& rejection : result.rejections) {
    if (rejection.index >= samples.size() || rejection.reason.empty()) std::abort();
  }
  // Reading back what was stored exercises the statistics on fuzzed values.
  (void)store.Stats(batch.job_id(), now);
  store.Tick(now + absl::Minutes(5));
  (void)store.Stats(batch.job_id(), now + absl::Minutes(5));
  return 0;
}
