#include "tools/bench_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "runtime/env.h"
#include "tools/commands.h"

namespace winnow::tools {

// "65536", "64K", "1M" (binary multiples).
int64_t parse_size(const std::string& flag, const std::string& s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec == std::errc{} && p != end && p + 1 == end) {
    if (*p == 'K' || *p == 'k') v <<= 10, p = end;
    else if (*p == 'M' || *p == 'm') v <<= 20, p = end;
  }
  if (ec != std::errc{} || p != end || v <= 0)
    throw UsageError(flag + " expects positive integers separated by commas, got '" + s + "'");
  return v;
}

std::vector<int64_t> parse_sizes(const std::string& flag, const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(parse_size(flag, item));
  if (out.empty()) throw UsageError(flag + " needs at least one value");
  return out;
}

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= s.size();) {
    const size_t next = std::min(s.find(sep, at), s.size());
    if (next > at) out.push_back(s.substr(at, next - at));
    at = next + 1;
  }
  return out;
}

// The number after "key": in a flat JSON object; nullopt when missing or null. A scan,
// not a parser: the file is the one bench/ceilings.py writes.
std::optional<double> json_number(const std::string& text, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  size_t at = text.find(quoted);
  if (at == std::string::npos) return std::nullopt;
  at = text.find(':', at + quoted.size());  // keys may hold ':' themselves
  if (at == std::string::npos) return std::nullopt;
  const char* p = text.c_str() + at + 1;
  char* end = nullptr;
  const double v = std::strtod(p, &end);  // skips spaces; "null" parses as nothing
  if (end == p || !(v > 0)) return std::nullopt;
  return v;
}

std::optional<std::string> read_text(const std::string& path, const char* what,
                                     const char* fallback) {
  std::ifstream in(path);
  if (!in) {
    fmt::print(stderr, "{}: cannot read {}: {}\n", what, path, fallback);
    return std::nullopt;
  }
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string variant_with_nvrtc_options(const std::string& base) {
  const std::string opts = rt::env_get("WINNOW_NVRTC_OPTIONS").value_or("");
  if (opts.empty()) return base;
  return base.empty() ? opts : base + " " + opts;
}

std::string utc_date() {
  char date[16];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  return date;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) out += ch;
  }
  return out + "\"";
}

std::string json_bool(std::optional<bool> b) { return !b ? "null" : *b ? "true" : "false"; }

void emit(const std::string& out_path, const std::vector<std::string>& lines) {
  for (const auto& l : lines) fmt::print("{}\n", l);
  std::fflush(stdout);
  if (out_path.empty()) return;
  if (FILE* f = std::fopen(out_path.c_str(), "a")) {
    for (const auto& l : lines) std::fputs((l + "\n").c_str(), f);
    std::fclose(f);
  } else {
    fmt::print(stderr, "cannot append to {}\n", out_path);
  }
}

Ceilings published_ceilings(const std::string& gpu) {
  Ceilings c;  // the H200's
  if (gpu.find("H100") != std::string::npos) {
    c.copy_tbps = 3.022;
    c.bf16_tflops = 790;
    c.fp8_tflops = 1434;
    c.card = "H100";
  }
  return c;
}

std::string ceilings_text(const Ceilings& c) {
  return c.measured == 3 ? std::string(c.source()) : fmt::format("{} ({})", c.source(), c.card);
}

Ceilings read_ceilings(const std::string& path, const std::string& gpu) {
  Ceilings c = published_ceilings(gpu);
  if (path.empty()) return c;
  const std::string fallback =
      fmt::format("using the {}'s published values (docs/performance.md)", c.card);
  const auto file = read_text(path, "ceilings", fallback.c_str());
  if (!file) return c;
  const std::string& text = *file;
  auto take = [&](const char* key, double& slot) {
    if (auto v = json_number(text, key)) slot = *v, ++c.measured;
    else fmt::print(stderr, "ceilings: no {} in {}: using the {}'s published {}\n", key, path, c.card, slot);
  };
  take("copy_tbps", c.copy_tbps);
  take("bf16_tflops", c.bf16_tflops);
  take("fp8_tflops", c.fp8_tflops);
  return c;
}


double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t free_device_memory() {
  size_t free = 0, total = 0;
  rt::check(rt::driver().cuMemGetInfo(&free, &total), "cuMemGetInfo");
  return free;
}

bool bench_gpu_present() {
  std::string why;
  if (rt::gpu_available(&why)) return true;
  fmt::print(stderr, "winnow bench needs a GPU ({})\n", why);
  return false;
}

}  // namespace winnow::tools
