// Random device inputs for `winnow bench` workloads, generated on every core from a table
// of encoded samples (testing/fast_fill.h) and uploaded in slices.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "ops/common/tensor.h"
#include "runtime/cuda_driver.h"
#include "testing/fast_fill.h"
#include "testing/host_data.h"

namespace winnow::tools {

// Fills device memory of `bytes` in jobs of `job_bytes` (a multiple of the element size),
// one job per core at a time through a host slice: fill(job, dst, n) writes job `job`'s
// n bytes at dst.
template <class Fill>
rt::DeviceBuffer upload_in_slices(size_t bytes, size_t job_bytes, const Fill& fill) {
  rt::DeviceBuffer dev(std::max<size_t>(bytes, 16));
  const size_t jobs_per_slice = std::max(1u, std::thread::hardware_concurrency());
  const size_t jobs = (bytes + job_bytes - 1) / job_bytes;
  std::vector<uint8_t> host(std::min(jobs, jobs_per_slice) * job_bytes);
  for (size_t first = 0; first < jobs; first += jobs_per_slice) {
    const size_t n_jobs = std::min(jobs_per_slice, jobs - first);
    const size_t begin = first * job_bytes, end = std::min(bytes, (first + n_jobs) * job_bytes);
    ops::parallel_for(n_jobs, [&](size_t j) {
      const size_t b0 = (first + j) * job_bytes;
      fill(first + j, host.data() + j * job_bytes, std::min(job_bytes, bytes - b0));
    });
    rt::check(rt::driver().cuMemcpyHtoD(dev.ptr() + begin, host.data(), end - begin),
              "cuMemcpyHtoD (inputs)");
  }
  return dev;
}

// 65536 encoded samples of `dist` in `dtype`: the table fill_chunk draws from.
template <class Dist>
ops::HostTensor sample_table(ops::DType dtype, Dist dist, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> samples(size_t(1) << 16);
  for (float& x : samples) x = dist(rng);
  return ops::make_tensor(dtype, std::move(samples));
}

// n codes of `table` at dst (element size 1, 2 or 4 bytes).
inline void fill_codes(uint8_t* dst, size_t n, const ops::HostTensor& table, size_t eb,
                       uint64_t state) {
  switch (eb) {
    case 1: ops::fill_chunk(dst, n, table.bytes.data(), state); break;
    case 2:
      ops::fill_chunk(reinterpret_cast<uint16_t*>(dst), n,
                      reinterpret_cast<const uint16_t*>(table.bytes.data()), state);
      break;
    default:
      ops::fill_chunk(reinterpret_cast<uint32_t*>(dst), n,
                      reinterpret_cast<const uint32_t*>(table.bytes.data()), state);
  }
}

// `count` values of `dist` in `dtype`, generated in slices on every core and uploaded.
template <class Dist>
rt::DeviceBuffer random_device_tensor(ops::DType dtype, size_t count, Dist dist, uint64_t seed) {
  const ops::HostTensor table = sample_table(dtype, dist, seed);
  const size_t eb = size_t(ops::dtype_bytes(dtype));
  constexpr size_t kChunk = size_t(1) << 22;  // elements per job
  return upload_in_slices(count * eb, kChunk * eb, [&](size_t job, uint8_t* dst, size_t n) {
    fill_codes(dst, n / eb, table, eb, ops::splitmix64(seed * 0x100000001B3ull + job));
  });
}

// |k|^2 of each of the `num_keys` rows of `d` elements in device tensor `k` (the key_norms
// input): the keys downloaded in slices, each row summed in double on every core, rounded
// to fp32, uploaded.
inline rt::DeviceBuffer device_key_norms(const rt::DeviceBuffer& k, ops::DType dtype,
                                         int64_t num_keys, int d) {
  const size_t eb = size_t(ops::dtype_bytes(dtype));
  constexpr int64_t kSlice = int64_t(1) << 16;  // keys a slice
  std::vector<float> norms(static_cast<size_t>(num_keys));
  std::vector<uint8_t> bytes(size_t(std::min(kSlice, num_keys)) * d * eb);
  for (int64_t first = 0; first < num_keys; first += kSlice) {
    const int64_t n = std::min(kSlice, num_keys - first);
    rt::check(rt::driver().cuMemcpyDtoH(bytes.data(), k.ptr() + size_t(first) * d * eb,
                                        size_t(n) * d * eb),
              "cuMemcpyDtoH (keys for their norms)");
    constexpr int64_t kJob = 1024;
    ops::parallel_for(size_t((n + kJob - 1) / kJob), [&](size_t j) {
      const int64_t a = int64_t(j) * kJob, b = std::min(n, a + kJob);
      const std::vector<float> v =
          ops::decode_values(dtype, bytes.data() + size_t(a) * d * eb, size_t(b - a) * d);
      for (int64_t r = 0; r < b - a; ++r) {
        double sq = 0;
        for (int i = 0; i < d; ++i) sq += double(v[size_t(r) * d + i]) * v[size_t(r) * d + i];
        norms[size_t(first + a + r)] = float(sq);
      }
    });
  }
  rt::DeviceBuffer dev(std::max<size_t>(norms.size() * 4, 16));
  dev.upload(norms.data(), norms.size() * 4);
  return dev;
}

}  // namespace winnow::tools
