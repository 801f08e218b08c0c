// Every switch winnow has, declared once: the environment variables the library, the tool,
// the Python package and the tests read, and the WINNOW_* macros the templates test (set
// with -D through WINNOW_NVRTC_OPTIONS). docs/environment.md is generated from this list
// (`winnow env --markdown`); a [lint] test checks that the sources read nothing else.
#pragma once
#include <optional>
#include <span>
#include <string>

namespace winnow::rt {

enum class SwitchKind { Environment, Macro };
enum class SwitchType { Bool, Int, String, Path, Enum };
// stable: part of the interface. debug: checks and reports that change no result.
// experimental: a variant kept for comparison, not yet the default.
enum class SwitchStatus { Stable, Debug, Experimental };
// Who reads it: the library (and the `winnow` tool), the Python package, the tests and
// scripts, or the templates (a macro).
enum class SwitchReader { Library, Python, Tests, Templates };

struct Switch {
  const char* name;
  SwitchKind kind;
  SwitchType type;
  const char* values;         // Enum: "a|b|c"; Int: the range; otherwise ""
  const char* default_value;  // as the user sees it ("unset: ..." where unset means more)
  SwitchStatus status;
  SwitchReader reader;
  bool cache_relevant;        // an Environment value that goes into every cache key
  const char* doc;            // one line
};
std::span<const Switch> switch_registry();
const Switch* find_switch(const char* name);

// Reads a registered environment variable; throws std::logic_error for a name that is not
// registered as one.
std::optional<std::string> env_get(const char* name);

// "NAME=value\n" for each cache-relevant variable set to a non-empty value, sorted by
// name.
std::string cache_relevant_env();

// docs/environment.md: the registry as markdown tables.
std::string switches_markdown();

const char* to_string(SwitchKind);
const char* to_string(SwitchType);
const char* to_string(SwitchStatus);

}  // namespace winnow::rt
