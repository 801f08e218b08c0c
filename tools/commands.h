// The `winnow` command line: one run_* per subcommand, dispatched by tools/main.cpp.
// Each gets the arguments after `winnow`, so argv[0] is the subcommand's own name.
// Returns the exit code: 0 success, 1 failure, 2 a usage error (thrown as UsageError).
#pragma once
#include <charconv>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ops/common/names.h"

int run_compile(int argc, char** argv);
int run_cache(int argc, char** argv);
int run_demo(int argc, char** argv);
int run_bench(int argc, char** argv);
int run_bench_block(int argc, char** argv);  // `winnow bench block-select`
int run_bench_jit(int argc, char** argv);    // `winnow bench jit`
int run_bench_decode(int argc, char** argv); // `winnow bench dsa-decode`
int run_tune(int argc, char** argv);
int run_env(int argc, char** argv);

namespace winnow::tools {

// A mistake on the command line: main prints it with a pointer to --help and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Walks one subcommand's arguments: flags as `--name value` or `--name=value`.
class Args {
 public:
  Args(int argc, char** argv) : args_(argv + 1, argv + argc) {}

  // The next flag or word; false when none is left.
  bool next(std::string& flag) {
    if (pos_ >= args_.size()) return false;
    flag = args_[pos_++];
    inline_value_.reset();
    if (flag.rfind("--", 0) == 0) {
      const auto eq = flag.find('=');
      if (eq != std::string::npos) {
        inline_value_ = flag.substr(eq + 1);
        flag.resize(eq);
      }
    }
    current_ = flag;
    return true;
  }
  // The value of the flag just read.
  std::string value() {
    if (inline_value_) return *std::exchange(inline_value_, std::nullopt);
    if (pos_ >= args_.size()) throw UsageError(current_ + " needs a value");
    return args_[pos_++];
  }
  int int_value() {
    const std::string v = value();
    int out = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc{} || end != v.data() + v.size())
      throw UsageError(current_ + " expects an integer, got '" + v + "'");
    return out;
  }
  // A flag that takes no value must not be given one (`--sorted=1`).
  void no_value() {
    if (inline_value_) throw UsageError(current_ + " takes no value");
  }

 private:
  std::vector<std::string> args_;
  size_t pos_ = 0;
  std::string current_;
  std::optional<std::string> inline_value_;
};

// A q / k dtype flag's value, in any spelling ops/common/names.h accepts.
inline ops::DType dtype_value(const std::string& flag, const std::string& value) {
  if (const std::optional<ops::DType> t = ops::parse_score_dtype(value)) return *t;
  throw UsageError(flag + " must be " + ops::score_dtype_choices() + ", not '" + value + "'");
}

[[noreturn]] inline void unknown_argument(const std::string& arg) {
  throw UsageError("unknown argument '" + arg + "'");
}

}  // namespace winnow::tools
