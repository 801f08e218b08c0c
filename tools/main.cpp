// `winnow`: dispatches to one subcommand and turns what it throws into a message and an
// exit code (2 for usage errors, 1 for everything else).
#include <fmt/format.h>

#include <cstring>
#include <exception>
#include <string>
#include <string_view>

#include "compiler/backend/backend.h"
#include "ops/common/errors.h"
#include "runtime/cuda_driver.h"
#include "compiler/build_id.h"
#include "tools/commands.h"
#include "winnow.h"

namespace {


constexpr const char* kUsage = R"(winnow: fused score + top-k GPU kernels, generated at run time.

Usage: winnow <command> [options]

Commands:
  demo      run a small problem on the GPU and check it against the CPU reference
  bench     time a workload of docs/performance.md (fused vs materialize vs floor), JSON out
  compile   print the IR, the generated CUDA source or the PTX of a kernel, or write its cubin
  cache     list, verify or clear the on-disk kernel cache
  tune      tune a workload's plan on the GPU, or list / clear the tuning database
  env       list the environment variables and switches (--markdown: docs/environment.md)

Options:
  -h, --help     this text
  --version      the version and build

Run 'winnow <command> --help' for the options of one command.
)";

struct Command {
  const char* name;
  int (*run)(int, char**);
};
constexpr Command kCommands[] = {
    {"demo", run_demo},
    {"bench", run_bench},
    {"compile", run_compile},
    {"cache", run_cache},
    {"tune", run_tune},
    {"env", run_env},
};

int dispatch(const Command& cmd, int argc, char** argv) {
  try {
    return cmd.run(argc, argv);
  } catch (const winnow::tools::UsageError& e) {
    fmt::print(stderr, "winnow {}: {}\nRun 'winnow {} --help' for usage.\n", cmd.name, e.what(),
               cmd.name);
    return 2;
  } catch (const winnow::backend::CompileError& e) {
    fmt::print(stderr, "winnow {}: compilation failed: {}\n", cmd.name, e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "winnow {}: error: {}\n", cmd.name, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "{}", kUsage);
    return 2;
  }
  const std::string_view first = argv[1];
  if (first == "-h" || first == "--help") {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (first == "--version") {
    fmt::print("winnow {}.{} ({})\n", WINNOW_VERSION_MAJOR, WINNOW_VERSION_MINOR,
               winnow::build_id());
    return 0;
  }
  // `winnow help compile` is `winnow compile --help`.
  if (first == "help" && argc >= 3) {
    char help_flag[] = "--help";
    char* args[] = {argv[2], help_flag};
    for (const Command& cmd : kCommands)
      if (args[0] == std::string_view(cmd.name)) return dispatch(cmd, 2, args);
  } else if (first == "help") {
    fmt::print("{}", kUsage);
    return 0;
  }
  for (const Command& cmd : kCommands)
    if (first == cmd.name) return dispatch(cmd, argc - 1, argv + 1);
  fmt::print(stderr, "winnow: unknown command '{}'\nRun 'winnow --help' for the commands.\n",
             first == "help" ? argv[2] : argv[1]);
  return 2;
}
