#include "runtime/knob_text.h"

#include <sstream>

namespace winnow::rt {

std::optional<std::map<std::string, int>> parse_knob_text(const std::string& text) {
  std::map<std::string, int> out;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    const auto eq = word.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    int value = 0;
    try {
      std::size_t used = 0;
      value = std::stoi(word.substr(eq + 1), &used);
      if (used != word.size() - eq - 1) return std::nullopt;
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (!out.emplace(word.substr(0, eq), value).second) return std::nullopt;
  }
  return out;
}

}  // namespace winnow::rt
