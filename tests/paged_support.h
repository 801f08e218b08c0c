// The paged decode op's test helpers (tests/test_paged.cpp, test_paged_stream.cpp,
// test_paged_stream_emulated.cpp): a small problem and, with a GPU, one call checked row by
// row against the CPU reference.
#pragma once
#include <random>
#include <vector>

#include "compiler/backend/backend.h"
#include "ops/paged/paged_topk.h"
#include "support.h"
#include "testing/fast_fill.h"
#include "testing/paged_harness.h"
#include "topk_check.h"
#include "testing/paged_reference.h"

namespace winnow::test {

inline ops::PagedProblem decode_problem(int heads, int k, int next_n, int max_batch, int max_blocks) {
  ops::PagedProblem p;
  p.heads = heads;
  p.k = k;
  p.next_n = next_n;
  p.max_batch = max_batch;
  p.max_blocks_per_seq = max_blocks;
  p.arch = backend::parse_arch("sm_90a");
  return p;
}

// Rows of a result that differ from the reference (the first three reported), checked on
// every core (a row's reference scores its whole window in double).
inline int64_t paged_wrong_rows(const ops::PagedProblem& p, const ops::PagedHostData& d,
                                const std::vector<int>& indices) {
  const ops::GatheredDecode g = ops::gather_decode(p, d);
  const size_t rows = size_t(d.batch) * size_t(d.next_n);
  std::vector<char> differs(rows, 0);
  ops::parallel_for(rows, [&](size_t row) {
    differs[row] = !ops::paged_row_matches(p, g, int64_t(row), &indices[row * size_t(p.k)]);
  });
  int64_t wrong = 0;
  for (size_t row = 0; row < rows; ++row) {
    if (differs[row] && wrong++ < 3) UNSCOPED_INFO("row " << row << " differs from the reference");
  }
  return wrong;
}

// Runs one decode call on the device and checks every row against the reference.
inline void check_paged_on_gpu(ops::PagedProblem p, const std::vector<int>& lens,
                               const ops::PagedDataOptions& opt = {}) {
  auto& f = GpuFixture::get();
  p.arch = ops::device_arch(*f.ctx);
  std::mt19937_64 rng(test_seed() ^ (uint64_t(lens.size()) * 7919u + p.k + p.next_n));
  const ops::PagedHostData d = ops::random_paged_data(p, lens, rng, opt);
  auto op = ops::PagedTopkOp::create(p, f.ctx.get());
  op->build(*f.cache, *f.be);
  const ops::PagedRunResult r = ops::run_paged_on_device(*op, *f.ctx, d);
  CHECK(paged_wrong_rows(p, d, r.indices) == 0);
}

inline std::vector<int> random_lens(int batch, int max_len, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> u(0, max_len);
  std::vector<int> lens(static_cast<size_t>(batch));
  for (int& n : lens) n = u(rng);
  return lens;
}

}  // namespace winnow::test
