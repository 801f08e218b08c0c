// SHA-256 through OpenSSL's EVP interface (libcrypto is linked statically).
#include "runtime/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace winnow::rt {

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &len, EVP_sha256(), nullptr) != 1 || len != 32)
    throw std::runtime_error("winnow: OpenSSL EVP_Digest(SHA-256) failed");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned i = 0; i < len; ++i) {
    out[2 * i] = kHex[digest[i] >> 4];
    out[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace winnow::rt
