#include "testing/paged_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "testing/host_data.h"
#include "paged/paged_cache.cuh"

namespace winnow::ops {

PagedHostData random_paged_data(const PagedProblem& p, const std::vector<int>& lens,
                                std::mt19937_64& rng, const PagedDataOptions& opt) {
  PagedHostData d;
  d.batch = int(lens.size());
  d.next_n = p.next_n;
  d.heads = p.heads;
  d.max_blocks = p.max_blocks_per_seq;
  d.lens_per_query = opt.lens_per_query;
  int64_t pages = 0;
  for (int n : lens) pages += (std::max(n, 0) + kPageKeys - 1) / kPageKeys;
  d.num_blocks = pages + 3;  // a few blocks no request uses
  HostTensor q = random_tensor(DType::E4M3, size_t(d.batch) * p.next_n * p.heads * kPageDim, rng,
                               1.0f, opt.levels);
  d.q = q.bytes;
  d.cache.assign(size_t(d.num_blocks) * kPageBytes, 0);
  std::uniform_real_distribution<float> ks(0.25f, 2.0f), wd(-1.0f, 1.0f), u(0, 1);
  for (int64_t b = 0; b < d.num_blocks; ++b) {
    HostTensor keys = random_tensor(DType::E4M3, size_t(kPageKeyBytes), rng, 1.0f, opt.levels);
    uint8_t* page = &d.cache[size_t(b) * kPageBytes];
    std::memcpy(page, keys.bytes.data(), kPageKeyBytes);
    for (int i = 0; i < kPageKeys; ++i) {
      if (opt.nan_fraction > 0 && u(rng) < opt.nan_fraction) page[i * kPageDim] = 0x7F;
      const float s = opt.levels > 0 ? 1.0f : ks(rng);
      std::memcpy(page + kPageKeyBytes + 4 * i, &s, 4);
    }
  }
  std::vector<int> order(size_t(d.num_blocks));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  d.block_table.assign(size_t(d.batch) * d.max_blocks, -1);
  size_t next = 0;
  for (int r = 0; r < d.batch; ++r) {
    const int n_pages = (std::max(lens[r], 0) + kPageKeys - 1) / kPageKeys;
    for (int i = 0; i < n_pages && i < d.max_blocks; ++i)
      d.block_table[size_t(r) * d.max_blocks + i] = order[next++];
  }
  for (int r = 0; r < d.batch; ++r) {
    if (!opt.lens_per_query) {
      d.context_lens.push_back(lens[r]);
      continue;
    }
    // The [B, next_n] form the engines pass: the lengths of the [B] rule, written out.
    for (int j = 0; j < p.next_n; ++j) d.context_lens.push_back(std::max(0, lens[r] - p.next_n + 1 + j));
  }
  d.w.resize(size_t(d.batch) * p.next_n * p.heads);
  for (float& x : d.w) x = opt.levels > 0 ? float(int(wd(rng) * 4)) : wd(rng);
  return d;
}

GatheredDecode gather_decode(const PagedProblem& p, const PagedHostData& d) {
  GatheredDecode g;
  HostInputs& in = g.in;
  const int per = d.lens_per_query ? d.next_n : 1;
  in.rows = int64_t(d.batch) * d.next_n;
  in.heads = d.heads;
  in.dim = kPageDim;
  in.q = decode_values(DType::E4M3, d.q.data(), d.q.size());
  in.w = d.w;
  const int max_keys = d.max_blocks * kPageKeys;
  for (int r = 0; r < d.batch; ++r) {
    const int* lens = &d.context_lens[size_t(r) * per];
    const int n = paged_request_keys(lens, d.next_n, d.lens_per_query);
    bool bad = n < 0 || n > max_keys;
    for (int j = 0; d.lens_per_query && j < d.next_n; ++j) bad = bad || lens[j] < 0;
    for (int i = 0; !bad && i * kPageKeys < n; ++i) {
      const int blk = d.block_table[size_t(r) * d.max_blocks + i];
      bad = blk < 0 || blk >= d.num_blocks;
    }
    g.base.push_back(in.num_keys);
    g.bad.push_back(bad);
    for (int j = 0; j < d.next_n; ++j) {
      const int v = bad ? 0 : paged_visible_keys(lens, d.next_n, j, d.lens_per_query);
      in.window_start.push_back(bad ? 1 : int(in.num_keys));
      in.window_end.push_back(bad ? 0 : int(in.num_keys + v));
    }
    if (bad) continue;
    for (int t = 0; t < n; ++t) {
      const int blk = d.block_table[size_t(r) * d.max_blocks + t / kPageKeys];
      const uint8_t* page = &d.cache[size_t(blk) * kPageBytes];
      const std::vector<float> key =
          decode_values(DType::E4M3, page + (t % kPageKeys) * kPageDim, kPageDim);
      in.k.insert(in.k.end(), key.begin(), key.end());
      float s;
      std::memcpy(&s, page + kPageKeyBytes + 4 * (t % kPageKeys), 4);
      in.kscale.push_back(s);
    }
    in.num_keys += n;
  }
  return g;
}

std::vector<int64_t> paged_reference_row(const PagedProblem& p, const GatheredDecode& g,
                                         int64_t row) {
  const TopkProblem t = paged_topk_problem(p);
  std::vector<int64_t> keys = reference_topk_row(t, g.in, row);
  for (int64_t& k : keys) k -= g.in.window_start[row];
  return keys;
}

bool paged_row_matches(const PagedProblem& p, const GatheredDecode& g, int64_t row,
                       const int* got_row) {
  const TopkProblem t = paged_topk_problem(p);
  const int64_t base = g.in.window_start[row];
  std::vector<int64_t> got;
  for (int i = 0; i < p.k; ++i) {
    if (got_row[i] < -1) return false;
    if (got_row[i] >= 0) got.push_back(got_row[i] + base);
  }
  const KeyWindow w = row_window(t, g.in, row);
  if (w.bad) return got.empty();
  return near_reference_selection(t, g.in, row, got);
}

}  // namespace winnow::ops
