// What a tuned plan is keyed on in the tuning database (docs/design.md, Cache), and the
// bucket rule: which call sizes share one tuned plan.
//
// Bucket rule: a size n >= 1 falls in the bucket of the smallest power of two >= n, so
// sizes in (2^(b-1), 2^b] share a plan: rows 33..64 share the bucket 64, keys
// 40001..65536 the bucket 65536. Key counts below 1024 share the bucket 1024 (one
// launch's fixed costs dominate there); k buckets the same way from 1 (k = 2048 is
// bucket 2048, k = 2049 bucket 4096). A plan is tuned at a bucket's upper edge or
// inside it and serves every size in it.
#pragma once
#include <cstdint>
#include <string>

namespace winnow::rt {

// Bumped when the database's tables or a record's meaning change: rows of another
// version are never read (a foreign-version database is a miss with one warning).
inline constexpr int kTuningSchemaVersion = 1;

int64_t size_bucket(int64_t n, int64_t floor);  // the smallest power of two >= max(n, floor)
int64_t rows_bucket(int64_t rows);               // size_bucket(rows, 1)
int64_t keys_bucket(int64_t keys);               // size_bucket(keys, 1024)
int k_bucket(int k);                             // size_bucket(k, 1)
// "h64.d128.r65536.n65536": heads and head dim exactly, rows and keys by bucket.
std::string shape_bucket(int heads, int head_dim, int64_t rows, int64_t keys);

struct TuningKey {
  std::string op;          // "topk"
  std::string score_hash;  // SHA-256 of the canonical score program's text
  std::string dtypes;      // "q=fp8_e4m3 k=fp8_e4m3"
  std::string window;      // "dense", "ranges", "causal"
  std::string arch;        // "sm_90a"
  std::string gpu;         // the device's name; "none" for a compile-only context
  int sm_count = 0;
  std::string driver;      // cuDriverGetVersion, "none" without a device
  std::string compiler;    // "nvrtc 13.0", and a hash of the cache-relevant variables set
  int schema = kTuningSchemaVersion;
  std::string shape;       // shape_bucket(...)
  int k_bucket = 0;
  // Every field, "name=value" separated by spaces: the database's primary key and what
  // `winnow tune --show` prints.
  std::string text() const;
  bool operator==(const TuningKey&) const = default;
};

}  // namespace winnow::rt
