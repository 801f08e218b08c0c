// Sharded top-k on one GPU (issue 19): R shard plans over slices of K, merged through a fake
// communicator (the callback replays the packed lists of R merge calls made on this GPU)
// and through the loopback form, equal to the unsharded fused top-k bit for bit.
#include <cstring>
#include <random>

#include "ops/shard/shard_merge.h"
#include "testing/harness.h"
#include "testing/shard_reference.h"
#include "topk_check.h"

using namespace winnow;

namespace {

// Keys [a, b) of d (q, weights and windows as they are: windows are global).
ops::ProblemData key_slice(const ops::TopkProblem& p, const ops::ProblemData& d, int64_t a,
                           int64_t b) {
  ops::ProblemData s = d;
  s.num_keys = b - a;
  const size_t eb = ops::dtype_bytes(p.k_dtype), dim = size_t(p.head_dim);
  s.k.values.assign(d.k.values.begin() + a * dim, d.k.values.begin() + b * dim);
  s.k.bytes.assign(d.k.bytes.begin() + a * dim * eb, d.k.bytes.begin() + b * dim * eb);
  if (!d.kscale.empty()) s.kscale.assign(d.kscale.begin() + a, d.kscale.begin() + b);
  return s;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void require_same(const std::vector<int>& gi, const std::vector<float>& gs,
                  const std::vector<int>& wi, const std::vector<float>& ws, int k) {
  REQUIRE(gi.size() == wi.size());
  for (size_t i = 0; i < wi.size(); ++i) {
    INFO("row " << i / k << " slot " << i % k);
    REQUIRE(gi[i] == wi[i]);
    REQUIRE(bits(gs[i]) == bits(ws[i]));
  }
}

void check_sharded(ops::TopkProblem p, int64_t rows, int64_t total, int ranks,
                   const ops::DataOptions& opt) {
  auto& f = test::GpuFixture::get();
  const rt::DriverApi& cu = rt::driver();
  std::mt19937_64 rng(test::test_seed() ^ (uint64_t(total) * 2654435761u + ranks + p.k));
  const ops::ProblemData d = ops::random_problem(p, rows, total, rng, opt);
  const ops::RunResult whole = ops::run_on_device(*f.build(p), *f.ctx, d);
  // Unequal shards, one possibly empty.
  std::vector<int64_t> cuts{0, total};
  std::uniform_int_distribution<int64_t> at(0, total);
  for (int r = 1; r < ranks; ++r) cuts.push_back(at(rng));
  std::sort(cuts.begin(), cuts.end());
  std::vector<ops::TopkLists> lists;
  std::vector<int> all_idx;
  std::vector<float> all_sc;
  for (int r = 0; r < ranks; ++r) {
    ops::TopkProblem ps = p;
    ps.shard_key_offset = cuts[r];
    ps.total_keys = total;
    const ops::RunResult part =
        cuts[r + 1] > cuts[r]
            ? ops::run_on_device(*f.build(ps), *f.ctx, key_slice(p, d, cuts[r], cuts[r + 1]))
            // An empty shard: nothing to run, all padding.
            : ops::RunResult{std::vector<int>(size_t(rows) * p.k, -1),
                             std::vector<float>(size_t(rows) * p.k, 0.0f)};
    lists.push_back({int(rows), p.k, part.indices, part.scores});
    all_idx.insert(all_idx.end(), part.indices.begin(), part.indices.end());
    all_sc.insert(all_sc.end(), part.scores.begin(), part.scores.end());
  }
  // The CPU merge of the device's lists equals the device's unsharded result.
  const ops::TopkLists cpu = ops::merge_shard_lists(lists, p.sorted);
  require_same(cpu.indices, cpu.scores, whole.indices, whole.scores, p.k);

  ops::ShardMergeProblem mp;
  mp.ranks = ranks;
  mp.k = p.k;
  mp.max_rows = rows;
  mp.sorted = p.sorted;
  mp.arch = ops::device_arch(*f.ctx);
  auto merge = ops::ShardMergeOp::create(mp, f.ctx.get());
  merge->build(*f.cache, *f.be);
  f.ctx->bind();
  rt::DeviceBuffer li = ops::upload(all_idx), ls = ops::upload(all_sc);
  rt::DeviceBuffer oi(size_t(rows) * p.k * 4), os(size_t(rows) * p.k * 4);
  rt::DeviceBuffer ws(merge->workspace_bytes());
  const ops::TensorView out_i = ops::contiguous_view(oi.data(), ops::DType::I32, {rows, p.k});
  const ops::TensorView out_s = ops::contiguous_view(os.data(), ops::DType::F32, {rows, p.k});
  std::vector<int> got_i(size_t(rows) * p.k);
  std::vector<float> got_s(got_i.size());
  auto download = [&] {
    rt::check(cu.cuCtxSynchronize(), "cuCtxSynchronize");
    oi.download(got_i.data(), got_i.size() * 4);
    os.download(got_s.data(), got_s.size() * 4);
  };
  // Loopback: every rank's lists in this process.
  merge->execute(ops::contiguous_view(li.data(), ops::DType::I32, {ranks, rows, p.k}),
                 ops::contiguous_view(ls.data(), ops::DType::F32, {ranks, rows, p.k}), nullptr,
                 out_i, &out_s, ws.data(), ws.size(), nullptr);
  download();
  require_same(got_i, got_s, whole.indices, whole.scores, p.k);

  // The fake communicator: pass 1 records each rank's send buffer, pass 2 replays all of
  // them as the all-gather of each rank, whose merge must equal the unsharded result.
  const size_t list_bytes = size_t(rows) * p.k * 8;
  rt::DeviceBuffer staging(std::max<size_t>(list_bytes * ranks, 16));
  for (int pass = 0; pass < 2; ++pass) {
    for (int r = 0; r < ranks; ++r) {
      const ops::AllGather fake = [&](const void* send, void* recv, size_t bytes, CUstream s) {
        REQUIRE(bytes == list_bytes);
        if (pass == 0) {
          rt::check(cu.cuMemcpyDtoDAsync(staging.ptr() + r * bytes, CUdeviceptr(send), bytes, s),
                    "record");
        } else {
          rt::check(cu.cuMemcpyDtoDAsync(CUdeviceptr(recv), staging.ptr(), bytes * ranks, s),
                    "replay");
        }
      };
      const size_t at = size_t(r) * rows * p.k;
      merge->execute(ops::contiguous_view(static_cast<int*>(li.data()) + at, ops::DType::I32,
                                          {rows, p.k}),
                     ops::contiguous_view(static_cast<float*>(ls.data()) + at, ops::DType::F32,
                                          {rows, p.k}),
                     &fake, out_i, &out_s, ws.data(), ws.size(), nullptr);
      if (pass == 1) {
        download();
        INFO("rank " << r);
        require_same(got_i, got_s, whole.indices, whole.scores, p.k);
      }
    }
  }
  uint32_t counters[2] = {1, 1};
  ws.download(counters, 8);
  CHECK(counters[0] == 0);  // no key twice: the shards are disjoint
  CHECK(counters[1] == 0);
}

}  // namespace

TEST_CASE("sharded relu_mh top-k merged on one GPU equals the unsharded", "[gpu][shard]") {
  WINNOW_REQUIRE_GPU();
  const int ranks = GENERATE(1, 2, 3, 8);
  const bool sorted = GENERATE(false, true);
  ops::TopkProblem p = test::relu_mh_problem(64, sorted ? 2048 : 512, ops::DType::E4M3);
  p.sorted = sorted;
  INFO("R = " << ranks << ", sorted " << sorted);
  check_sharded(p, 19, 20000, ranks, {});
}

TEST_CASE("sharded ranges windows (global positions) and heavy ties merge exactly",
          "[gpu][shard]") {
  WINNOW_REQUIRE_GPU();
  const int ranks = GENERATE(2, 5);
  ops::TopkProblem p = test::relu_mh_problem(32, 256, ops::DType::E4M3);
  p.window = ops::WindowKind::Ranges;
  p.absolute_indices = GENERATE(false, true);
  ops::DataOptions ties;
  ties.levels = 3;
  INFO("R = " << ranks << ", absolute " << p.absolute_indices);
  check_sharded(p, 23, 9000, ranks, ties);
}

TEST_CASE("sharded knn (ip, fp16) with k above the total keys pads like the unsharded",
          "[gpu][shard]") {
  WINNOW_REQUIRE_GPU();
  ops::TopkProblem p = test::single_head(ir::ip(), 128, 1024, ops::DType::F16);
  check_sharded(p, 7, 700, 4, {});
  p.k = 64;
  p.window = ops::WindowKind::Causal;
  p.causal_offset = 5000;
  check_sharded(p, 9, 5100, 3, {});
}
