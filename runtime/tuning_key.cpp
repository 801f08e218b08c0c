#include "runtime/tuning_key.h"

#include <fmt/format.h>

namespace winnow::rt {

int64_t size_bucket(int64_t n, int64_t floor) {
  int64_t b = 1;
  const int64_t want = n > floor ? n : floor;
  while (b < want && b < (int64_t(1) << 62)) b *= 2;
  return b;
}
int64_t rows_bucket(int64_t rows) { return size_bucket(rows, 1); }
int64_t keys_bucket(int64_t keys) { return size_bucket(keys, 1024); }
int k_bucket(int k) { return int(size_bucket(k, 1)); }

std::string shape_bucket(int heads, int head_dim, int64_t rows, int64_t keys) {
  return fmt::format("h{}.d{}.r{}.n{}", heads, head_dim, rows_bucket(rows), keys_bucket(keys));
}

std::string TuningKey::text() const {
  return fmt::format("op={} score={} {} window={} arch={} gpu=\"{}\" sms={} driver={} "
                     "compiler=\"{}\" schema={} shape={} k={}",
                     op, score_hash, dtypes, window, arch, gpu, sm_count, driver, compiler,
                     schema, shape, k_bucket);
}

}  // namespace winnow::rt
