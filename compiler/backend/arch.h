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

// The targets winnow supports and tests: sm_90a and sm_100a. Others parse (the cache and
// the backend can name them) but the ops refuse them: sm_90 without 'a' has no wgmma,
// and nothing else is compiled and tested here.
bool is_supported(const Arch& a);
// "sm_90a (Hopper: wgmma and mma.sync tensor cores) and sm_100a (...)", for messages.
std::string supported_archs();

}  // namespace winnow::backend
