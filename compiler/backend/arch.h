// A GPU target: "sm_90a" -> {9, 0, 'a'}. The suffix matters: sm_90a code uses wgmma and
// runs only on sm_90; it is part of every cache key.
#pragma once
#include <string>
#include <string_view>

namespace winnow::backend {

struct Arch {
  int major = 9;
  int minor = 0;
  char suffix = 'a';  // 'a', 'f' or 0
  std::string str() const;            // "sm_90a"
  std::string compute_str() const;    // "compute_90a"
  bool operator==(const Arch&) const = default;
};
// Throws std::invalid_argument with a message naming the accepted forms.
Arch parse_arch(std::string_view text);

}  // namespace winnow::backend
