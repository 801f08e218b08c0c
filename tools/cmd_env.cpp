// `winnow env`: the switches of runtime/env.cpp's registry. Without options, each
// environment variable of the library with its value here; --markdown prints
// docs/environment.md.
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "runtime/env.h"
#include "tools/commands.h"

namespace {

constexpr const char* kHelp = R"(Usage: winnow env [--markdown]

Lists winnow's environment variables with their values in this environment (and marks
the cache-relevant ones); --markdown prints every switch, variables and template macros,
as the text of docs/environment.md.
)";

}  // namespace

int run_env(int argc, char** argv) {
  using namespace winnow::rt;
  winnow::tools::Args args(argc, argv);
  bool markdown = false;
  for (std::string flag; args.next(flag);) {
    if (flag == "-h" || flag == "--help") {
      fmt::print("{}", kHelp);
      return 0;
    }
    if (flag != "--markdown") throw winnow::tools::UsageError("unknown option '" + flag + "'");
    args.no_value();
    markdown = true;
  }
  if (markdown) {
    fmt::print("{}", switches_markdown());
    return 0;
  }
  for (const Switch& s : switch_registry()) {
    if (s.kind != SwitchKind::Environment || s.reader != SwitchReader::Library) continue;
    const char* value = std::getenv(s.name);
    fmt::print("{:<32} {:<13} {}{}\n", s.name, to_string(s.status),
               value ? fmt::format("= {}", value) : std::string("unset"),
               s.cache_relevant ? "  (cache-relevant)" : "");
  }
  return 0;
}
