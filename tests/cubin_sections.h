// The named sections of a cubin (an ELF64 little-endian file), for tests that compare what
// two compiles put in each: the SASS of a kernel is its ".text.<entry>" section.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace winnow::test {

// Section name -> contents (empty for sections without file data). Throws
// std::runtime_error on anything but a well-formed ELF64 little-endian image.
inline std::map<std::string, std::string> cubin_sections(const std::vector<char>& elf) {
  auto read = [&](size_t at, size_t bytes) -> uint64_t {
    if (at + bytes > elf.size()) throw std::runtime_error("cubin: truncated ELF");
    uint64_t v = 0;
    std::memcpy(&v, elf.data() + at, bytes);  // little-endian host, as the cubin
    return v;
  };
  if (elf.size() < 64 || std::memcmp(elf.data(), "\x7f" "ELF", 4) != 0 || elf[4] != 2 || elf[5] != 1)
    throw std::runtime_error("cubin: not an ELF64 little-endian image");
  const uint64_t shoff = read(0x28, 8), shentsize = read(0x3a, 2), shnum = read(0x3c, 2),
                 shstrndx = read(0x3e, 2);
  if (shentsize < 64 || shstrndx >= shnum) throw std::runtime_error("cubin: bad section table");
  auto header = [&](uint64_t i) { return shoff + i * shentsize; };
  const uint64_t names_at = read(header(shstrndx) + 0x18, 8);
  std::map<std::string, std::string> out;
  for (uint64_t i = 1; i < shnum; ++i) {
    const uint64_t h = header(i);
    const uint64_t name = read(h, 4), type = read(h + 4, 4), offset = read(h + 0x18, 8),
                   size = read(h + 0x20, 8);
    std::string n;
    for (uint64_t at = names_at + name; read(at, 1) != 0; ++at) n += static_cast<char>(read(at, 1));
    const bool nobits = type == 8;  // SHT_NOBITS: no data in the file
    if (!nobits && offset + size > elf.size()) throw std::runtime_error("cubin: section past the end");
    out[n] = nobits ? std::string() : std::string(elf.data() + offset, size);
  }
  return out;
}

}  // namespace winnow::test
