// `winnow cache`: the on-disk kernel cache (list, verify, clear).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/common/backend_choice.h"
#include "ops/common/compile_record.h"
#include "ops/common/jit_module.h"
#include "runtime/kernel_cache.h"
#include "tools/commands.h"

using winnow::tools::Args;
using winnow::tools::UsageError;

namespace {

constexpr const char* kHelp = R"(Usage: winnow cache ls|clear|verify [--dir DIR] [--fix]
       winnow cache replay RECORDS [--dir DIR] [--backend nvrtc|llvm]

The on-disk kernel cache (default $WINNOW_CACHE_DIR, else $XDG_CACHE_HOME/winnow, else
~/.cache/winnow).

  ls        list the entries: arch, key prefix, bytes, valid, description
  clear     remove every entry
  verify    check every entry; exits 1 if any is bad
    --fix   remove the bad entries
  replay    compile every request recorded in the folder RECORDS (a run under
            WINNOW_RECORD_COMPILES=RECORDS, possibly on another machine, with the same
            winnow build) with this machine's backend (--backend, else $WINNOW_BACKEND,
            else nvrtc) into the cache: e.g. the llvm backend's cubins for a GPU machine
            that has no LLVM. Each request is keyed under the cache-relevant
            environment it was recorded with (WINNOW_NVRTC_OPTIONS), as the recorded run
            keyed it. Exits 1 if a request fails to compile or read

Only entries are removed: a folder <arch>/<64 hex digits> holding kernel.cubin and a
meta.txt written by winnow. Symlinks (at any level) and anything else are never followed
or removed; each is reported ("left alone", "skipped").

Options:
  --dir DIR    the cache folder instead of the default
  -h, --help   this text
)";

// Entry descriptions and folder names come from the cache folder, which anyone who could
// write it may have filled: print control characters (and non-ASCII bytes) escaped, so
// they cannot move the cursor or rewrite the terminal.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c >= 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += char(c);
  }
  return out;
}

void print_skipped(const std::vector<winnow::rt::DiskStore::Skipped>& skipped, const char* verb) {
  for (const auto& s : skipped)
    fmt::print("{} {}: {}\n", verb, printable(s.path), printable(s.why));
}

// `winnow cache replay RECORDS`: every recorded request compiled by `be` into the cache.
int replay(const std::filesystem::path& records, const std::optional<std::string>& dir,
           const std::optional<std::string>& backend_name) {
  const auto be = winnow::ops::choose_backend(backend_name ? backend_name->c_str() : nullptr);
  winnow::rt::CubinCache cache(winnow::rt::DiskStore(dir ? std::filesystem::path(*dir) : winnow::rt::default_cache_dir()));
  std::vector<std::string> skipped;
  const auto recorded = winnow::ops::read_recorded_compiles(records, &skipped);
  for (const std::string& s : skipped) fmt::print("skipped {}\n", printable(s));
  int failed = int(skipped.size());
  fmt::print("replaying {} requests with {} {}\n", recorded.size(), be->name(), be->version());
  for (size_t i = 0; i < recorded.size(); ++i) {
    const auto& r = recorded[i];
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const winnow::ops::RecordedEnvScope env(r.env);  // part of the key
      const auto m = winnow::ops::compile_cached(cache, *be, r.request, r.stem, r.program, r.description);
      fmt::print("[{}/{}] {} {} {}: {:.1f} s\n", i + 1, recorded.size(), r.stem, r.request.arch.str(),
                 m.key.substr(0, 16),
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("[{}/{}] {} {}: FAILED: {}\n", i + 1, recorded.size(), r.stem, r.request.arch.str(),
                 printable(e.what()));
    }
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
}

}  // namespace

int run_cache(int argc, char** argv) {
  std::optional<std::string> action, dir, records, backend;
  bool fix = false;
  Args args(argc, argv);
  std::string flag;
  while (args.next(flag)) {
    if (flag == "-h" || flag == "--help") {
      fmt::print("{}", kHelp);
      return 0;
    } else if (flag == "--dir") {
      dir = args.value();
    } else if (flag == "--fix") {
      args.no_value();
      fix = true;
    } else if (flag == "--backend") {
      backend = args.value();
    } else if (!action && (flag == "ls" || flag == "clear" || flag == "verify" || flag == "replay")) {
      action = flag;
    } else if (action && *action == "replay" && !records && !flag.empty() && flag[0] != '-') {
      records = flag;
    } else {
      winnow::tools::unknown_argument(flag);
    }
  }
  if (!action) throw UsageError("give an action: ls, clear, verify or replay");
  if (fix && *action != "verify") throw UsageError("--fix goes with verify");
  if (backend && *action != "replay") throw UsageError("--backend goes with replay");
  if (*action == "replay") {
    if (!records) throw UsageError("replay needs the folder of recorded requests");
    if (!std::filesystem::is_directory(*records)) throw UsageError("replay: " + *records + " is not a folder");
    return replay(*records, dir, backend);
  }

  const std::filesystem::path root_path =
      dir ? std::filesystem::path(*dir) : winnow::rt::default_cache_dir();
  const std::string root = printable(root_path.string());
  std::error_code ec;
  const auto status = std::filesystem::symlink_status(root_path, ec);
  if (ec || !std::filesystem::exists(status)) {
    fmt::print("no entries in {} (no such folder)\n", root);
    return 0;
  }
  if (!std::filesystem::is_directory(status) && !std::filesystem::is_symlink(status))
    throw std::runtime_error(root + " is not a folder");
  const winnow::rt::DiskStore store(root_path);

  if (*action == "ls") {
    const auto listing = store.scan();
    print_skipped(listing.skipped, "skipped");
    const auto& entries = listing.entries;
    if (entries.empty()) {
      fmt::print("no entries in {}\n", root);
      return 0;
    }
    fmt::print("{:<9} {:<16} {:>10}  {:<5}  {}\n", "arch", "key", "bytes", "valid", "description");
    for (const auto& e : entries)
      fmt::print("{:<9} {:<16} {:>10}  {:<5}  {}\n", e.arch, e.key.substr(0, 16), e.bytes,
                 e.valid ? "yes" : "NO", printable(e.description));
    fmt::print("{} entries in {}\n", entries.size(), root);
    return 0;
  }
  if (*action == "clear") {
    const auto sweep = store.clear();
    print_skipped(sweep.skipped, "left alone");
    fmt::print("removed {} entries from {}\n", sweep.removed, root);
    return 0;
  }
  const auto sweep = store.verify(fix);
  print_skipped(sweep.skipped, "left alone");
  if (sweep.bad == 0) {
    fmt::print("every entry in {} is valid\n", root);
    return 0;
  }
  if (fix) {
    fmt::print("removed {} of {} bad entries from {}\n", sweep.removed, sweep.bad, root);
    return sweep.removed == sweep.bad ? 0 : 1;
  }
  fmt::print("{} bad entries in {} (run 'winnow cache verify --fix' to remove them)\n", sweep.bad,
             root);
  return 1;
}
