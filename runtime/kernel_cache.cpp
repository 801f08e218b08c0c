// The content key of a cubin and where the cache lives by default.
#include "runtime/kernel_cache.h"

#include <unistd.h>

#include <string>

#include "runtime/env.h"
#include "runtime/sha256.h"

namespace winnow::rt {
namespace {

// Each field is length-prefixed, so no two different inputs serialise to the same bytes.
void field(std::string& out, const char* name, const std::string& value) {
  out += name;
  out += ':';
  out += std::to_string(value.size());
  out += ':';
  out += value;
  out += '\n';
}

}  // namespace

std::string content_key(const ContentKeyInputs& in) {
  std::string text = "winnow-content-key\n";
  field(text, "schema_version", std::to_string(in.schema_version));
  field(text, "build_id", in.build_id);
  field(text, "template_hashes", in.template_hashes);
  field(text, "backend", in.backend);
  field(text, "arch", in.arch);
  field(text, "options", in.options);
  field(text, "program", in.program);
  field(text, "env", cache_relevant_env());
  return sha256_hex(text);
}

std::filesystem::path default_cache_dir() {
  namespace fs = std::filesystem;
  if (auto dir = env_get("WINNOW_CACHE_DIR"); dir && !dir->empty()) return fs::path(*dir);
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (auto xdg = env_get("XDG_CACHE_HOME"); xdg && !xdg->empty() && fs::path(*xdg).is_absolute())
    return fs::path(*xdg) / "winnow";
  if (auto home = env_get("HOME"); home && !home->empty())
    return fs::path(*home) / ".cache" / "winnow";
  // A shared folder: anyone may have created this name first, so DiskStore creates it
  // 0700 and uses it only when it is this user's and nobody else can write it.
  fs::path tmp = "/tmp";
  if (auto t = env_get("TMPDIR"); t && !t->empty() && fs::path(*t).is_absolute()) tmp = *t;
  return tmp / ("winnow-cache-" + std::to_string(::geteuid()));
}

}  // namespace winnow::rt
