#include "tools/anchor_ratios.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

#include "tools/bench_common.h"

namespace winnow::tools {
namespace {

// "1 record", "2 records".
std::string count_of(size_t n, const char* noun) {
  return fmt::format("{} {}{}", n, noun, n == 1 ? "" : "s");
}

// The same keys, each with an equal value, in any order (keys are unique on both sides).
bool same_params(const AnchorParams& a, const AnchorParams& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, value] : a) {
    const auto it = std::find_if(b.begin(), b.end(), [&](const auto& kv) { return kv.first == key; });
    if (it == b.end() || !(it->second == value)) return false;
  }
  return true;
}

}  // namespace

std::vector<const AnchorRecord*> matching_records(const AnchorFile& file,
                                                  const std::string& workload,
                                                  const AnchorParams& params) {
  std::vector<const AnchorRecord*> out;
  for (const AnchorRecord& r : file.records)
    if (r.workload == workload && same_params(r.params, params)) out.push_back(&r);
  return out;
}

std::vector<AnchorRatio> anchor_ratios(const AnchorFile& file, const std::string& workload,
                                       const AnchorParams& params, double winnow_ms) {
  std::vector<AnchorRatio> out;
  for (const AnchorRecord* r : matching_records(file, workload, params)) {
    AnchorRatio a;
    a.impl = r->impl;
    a.line = r->line;
    a.error = r->error;
    if (r->error.empty()) {
      a.ms = r->ms_median;
      a.ratio = winnow_ms / r->ms_median;
    }
    out.push_back(std::move(a));
  }
  // Timed records first, those with an error after them.
  std::stable_partition(out.begin(), out.end(), [](const AnchorRatio& a) { return a.error.empty(); });
  return out;
}

std::string anchor_fields(const std::string& path, const std::vector<AnchorRatio>& ratios) {
  std::string members;
  for (const AnchorRatio& a : ratios) {
    members += members.empty() ? "" : ", ";
    members += json_string(a.impl) + ": ";
    members += a.error.empty() ? fmt::format("{{\"ms\": {:.4f}, \"ratio\": {:.4f}}}", a.ms, a.ratio)
                               : fmt::format("{{\"error\": {}}}", json_string(a.error));
  }
  return fmt::format(", \"anchors\": {{{}}}, \"anchors_file\": {}", members, json_string(path));
}

std::string anchor_table(const std::string& path, const std::vector<AnchorRow>& rows) {
  std::string out = fmt::format(
      "\nagainst the engines' records of {}: ratio = winnow ms / anchor ms (below 1: winnow is "
      "faster)\n{:<19} {:<20} {:<20} {:>10}  {:<30} {:>10} {:>7}\n",
      path, "workload", "size", "impl", "winnow ms", "anchor", "anchor ms", "ratio");
  for (const AnchorRow& r : rows) {
    const std::string head =
        fmt::format("{:<19} {:<20} {:<20} {:>10.3f}", r.workload, r.size, r.impl, r.winnow_ms);
    if (r.ratios.empty()) {
      out += fmt::format("{}  {}\n", head, r.why_none.empty() ? "no record" : r.why_none);
      continue;
    }
    for (size_t i = 0; i < r.ratios.size(); ++i) {
      const AnchorRatio& a = r.ratios[i];
      const std::string lead = i == 0 ? head : std::string(head.size(), ' ');
      if (a.error.empty())
        out += fmt::format("{}  {:<30} {:>10.3f} {:>7.3f}\n", lead, a.impl, a.ms, a.ratio);
      else
        out += fmt::format("{}  {:<30} error: {} (line {})\n", lead, a.impl, a.error, a.line);
    }
  }
  return out;
}

std::string anchor_file_summary(const AnchorFile& file) {
  std::string out =
      fmt::format("anchors: {}: {}", file.path, count_of(size_t(file.timed()), "timed record"));
  if (!file.notes.empty()) out += fmt::format(", {} skipped", count_of(file.notes.size(), "note line"));
  out += "\n";
  for (const AnchorRecord& r : file.records)
    if (!r.error.empty())
      out += fmt::format("anchors: line {}: {} {} {}: skipped, error: {}\n", r.line, r.workload,
                         r.impl, params_text(r.params), r.error);
  return out;
}

std::string anchor_gpu_warnings(const AnchorFile& file, const std::string& gpu) {
  std::map<std::string, int> others;
  for (const AnchorRecord& r : file.records)
    if (r.error.empty() && r.gpu && *r.gpu != gpu) ++others[*r.gpu];
  std::string out;
  for (const auto& [name, n] : others)
    out += fmt::format("anchors: WARNING: {} timed on {}, this run is on {}: their ratios "
                       "compare two cards\n",
                       count_of(size_t(n), "record"), name, gpu);
  return out;
}

std::string unmatched_records(const AnchorFile& file, const std::vector<AnchorRow>& rows) {
  // Only the workloads this run timed: records of other workloads are for other runs.
  std::set<int> matched;
  std::set<std::string> workloads;
  for (const AnchorRow& r : rows) {
    workloads.insert(r.workload);
    for (const AnchorRatio& a : r.ratios) matched.insert(a.line);
  }
  // (workload, params text) -> lines, in file order of first appearance.
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const AnchorRecord& r : file.records) {
    if (!r.error.empty() || matched.count(r.line) || !workloads.count(r.workload)) continue;
    const std::string name = r.workload + " " + params_text(r.params);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == name; });
    if (it == groups.end()) it = groups.insert(groups.end(), {name, {}});
    it->second.push_back(r.line);
  }
  std::string out;
  for (const auto& [name, lines] : groups)
    out += fmt::format("anchors: no row of this run for {} ({}, line{} {})\n", name,
                       count_of(lines.size(), "record"), lines.size() == 1 ? "" : "s",
                       fmt::join(lines, ","));
  return out;
}

}  // namespace winnow::tools
