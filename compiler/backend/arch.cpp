// Parsing and printing GPU targets ("sm_90a").
#include "compiler/backend/arch.h"

#include <stdexcept>

namespace winnow::backend {

std::string Arch::str() const {
  std::string s = "sm_" + std::to_string(major) + std::to_string(minor);
  if (suffix) s += suffix;
  return s;
}

std::string Arch::compute_str() const {
  std::string s = "compute_" + std::to_string(major) + std::to_string(minor);
  if (suffix) s += suffix;
  return s;
}

Arch parse_arch(std::string_view text) {
  auto reject = [&]() -> Arch {
    throw std::invalid_argument("invalid GPU architecture '" + std::string(text) +
                                "': expected sm_<major><minor>[a|f], for example sm_90a, "
                                "sm_100a or sm_100f");
  };
  if (text.substr(0, 3) != "sm_") return reject();
  std::string_view rest = text.substr(3);
  Arch arch;
  arch.suffix = 0;
  if (!rest.empty() && (rest.back() == 'a' || rest.back() == 'f')) {
    arch.suffix = rest.back();
    rest.remove_suffix(1);
  }
  // The last digit is the minor version, the ones before it the major (sm_100 = 10.0).
  if (rest.size() < 2 || rest.size() > 3 || rest[0] == '0') return reject();
  for (char c : rest)
    if (c < '0' || c > '9') return reject();
  arch.minor = rest.back() - '0';
  arch.major = std::stoi(std::string(rest.substr(0, rest.size() - 1)));
  return arch;
}

bool is_supported(const Arch& a) { return a == Arch{9, 0, 'a'} || a == Arch{10, 0, 'a'}; }

std::string supported_archs() {
  return "sm_90a (Hopper: wgmma, mma.sync and cp.async) and sm_100a (Blackwell: mma.sync; "
         "no wgmma or tcgen05 path)";
}

}  // namespace winnow::backend
