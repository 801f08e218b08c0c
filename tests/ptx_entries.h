// The PTX text of one entry of a module (from ".entry NAME" to the next entry or the end),
// for the [nvrtc] cases that require an instruction in every kernel of a module.
#pragma once
#include <string>

namespace winnow::test {

// "" when the module has no such entry.
inline std::string ptx_entry_text(const std::string& ptx, const std::string& entry) {
  const size_t at = ptx.find(".entry " + entry + "(");
  if (at == std::string::npos) return "";
  const size_t next = ptx.find(".entry ", at + 1);
  return ptx.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

}  // namespace winnow::test
