// What ptxas -v says of each entry of a module (--ptxas-options=-v in a compile request's
// options; the log of backend::CompileResult): the spill bytes, for the [nvrtc] cases that
// require a kernel without spills.
#pragma once
#include <regex>
#include <string>
#include <vector>

namespace winnow::test {

struct PtxasSpills {
  int stores = 0, loads = 0;
};

// One entry per "N bytes spill stores, M bytes spill loads" line, in the log's order.
inline std::vector<PtxasSpills> ptxas_spills(const std::string& log) {
  static const std::regex spill("([0-9]+) bytes spill stores, ([0-9]+) bytes spill loads");
  std::vector<PtxasSpills> out;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), spill); it != std::sregex_iterator(); ++it)
    out.push_back({std::stoi((*it)[1]), std::stoi((*it)[2])});
  return out;
}

}  // namespace winnow::test
