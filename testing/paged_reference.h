// The paged decode op's CPU reference (ops/paged/paged_topk.h): the engines' paged cache on the
// host, gathered request by request into the ragged contiguous form with one ranges
// window per query row, so the fused top-k's reference (testing/reference.h) scores and
// selects it: no second copy of the score or the rank order.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "ops/paged/paged_topk.h"
#include "testing/reference.h"

namespace winnow::ops {

// One decode call's inputs as the device reads them.
struct PagedHostData {
  int batch = 0, next_n = 1, heads = 64, max_blocks = 0;
  int64_t num_blocks = 0;
  std::vector<uint8_t> q;         // [batch, next_n, heads, 128] fp8 e4m3
  std::vector<uint8_t> cache;     // [num_blocks, 64, 1, 132]
  std::vector<int> block_table;   // [batch, max_blocks]
  std::vector<int> context_lens;  // [batch], or [batch, next_n] when lens_per_query
  bool lens_per_query = false;
  std::vector<float> w;           // [batch * next_n, heads]
};

struct PagedDataOptions {
  int levels = 0;             // > 0: integer keys and queries (heavy ties)
  double nan_fraction = 0;    // share of keys whose first element is NaN
  bool lens_per_query = false;
};

// Random inputs for `lens` (one length per request): every block table entry of a
// request names a distinct block, in a shuffled order, the rest of each row is -1.
PagedHostData random_paged_data(const PagedProblem& p, const std::vector<int>& lens,
                                std::mt19937_64& rng, const PagedDataOptions& opt = {});

// The gathered form: rows batch * next_n, keys of request r at [base[r], base[r] + len),
// row (r, j)'s window [base[r], base[r] + visible), weights as given.
struct GatheredDecode {
  HostInputs in;
  std::vector<int64_t> base;  // per request
  std::vector<bool> bad;      // per request: its rows are all -1
};
GatheredDecode gather_decode(const PagedProblem& p, const PagedHostData& d);

// Row (r, j)'s top k token positions, best first (empty for a bad request), by double
// scores.
std::vector<int64_t> paged_reference_row(const PagedProblem& p, const GatheredDecode& g,
                                         int64_t row);

// True when one output row (k slots, -1 padding, token positions) is the row's top k up to
// accumulation error (near_reference_selection), padding included.
bool paged_row_matches(const PagedProblem& p, const GatheredDecode& g, int64_t row,
                       const int* got_row);

}  // namespace winnow::ops
