// Every environment variable winnow reads, declared once, as cache-relevant (part of
// every cache key) or neutral.
#pragma once
#include <optional>
#include <span>
#include <string>

namespace winnow::rt {

struct EnvVar {
  const char* name;
  bool cache_relevant;
  const char* meaning;
};
std::span<const EnvVar> env_registry();

// Reads a registered variable; throws std::logic_error for an unregistered name.
std::optional<std::string> env_get(const char* name);

// "NAME=value\n" for each set cache-relevant variable, sorted by name.
std::string cache_relevant_env();

}  // namespace winnow::rt
