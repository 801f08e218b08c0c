#pragma once
#include <string>
#include <string_view>

namespace winnow::rt {
// Lower-case hex SHA-256 of the bytes (OpenSSL).
std::string sha256_hex(std::string_view bytes);
}  // namespace winnow::rt
