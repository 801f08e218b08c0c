// Runs the `winnow` command line built with the tests, as a user runs it.
#pragma once
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace winnow::test {

struct ToolRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// The binary: the one built with the tests, or $WINNOW_TEST_TOOL where the tests run from
// another folder than their build (a GPU machine given the binaries alone).
inline std::string tool_path() {
  const char* v = std::getenv("WINNOW_TEST_TOOL");
  return v && *v ? std::string(v) : std::string(WINNOW_TOOL_PATH);
}

// Runs `winnow <args>` (args are shell words, quoted by the caller where needed).
inline ToolRun run_tool(const std::string& args) {
  ToolRun r;
  const std::string command = "'" + tool_path() + "' " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace winnow::test
