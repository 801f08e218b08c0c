// The product's text holds no development history and no dangling file names. The product
// folders (README.md, docs/, include/, compiler/, runtime/, ops/, templates/, tools/,
// python/ but python/tests/, CMakeLists.txt, cmake/) are what a user reads: a comment or a
// page there says what the code does and why, so it names no session, issue or visit of
// the team's work (those numbers mean nothing outside it), and every repository file it
// names exists (files get moved and renamed; a name left behind sends the reader nowhere).
// Each case lists every offending file:line in its failure.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = WINNOW_SOURCE_DIR;

// Text files only: sources, scripts and pages (docs/img's pictures are not read).
bool is_text(const fs::path& p) {
  static const std::vector<std::string> exts = {".h",   ".hpp", ".c",     ".cpp",  ".cc",
                                                ".cuh", ".cu",  ".def",   ".py",   ".pyi",
                                                ".md",  ".txt", ".cmake", ".toml", ".sh",
                                                ".map", ".in",  ".json"};
  for (const auto& e : exts)
    if (p.extension() == e) return true;
  return false;
}

// The product's text files, as paths relative to the repository root, sorted.
std::vector<fs::path> product_files() {
  std::vector<fs::path> files;
  for (const char* f : {"README.md", "CMakeLists.txt"})
    if (fs::is_regular_file(kRoot / f)) files.emplace_back(f);
  for (const char* d : {"docs", "include", "compiler", "runtime", "ops", "templates", "tools",
                        "python", "cmake"}) {
    if (!fs::is_directory(kRoot / d)) continue;
    for (auto it = fs::recursive_directory_iterator(kRoot / d);
         it != fs::recursive_directory_iterator(); ++it) {
      const fs::path rel = fs::relative(it->path(), kRoot);
      const std::string name = it->path().filename().string();
      if (it->is_directory() &&
          (rel == "python/tests" || name == "__pycache__" || name.front() == '.')) {
        it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && is_text(rel)) files.push_back(rel);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Calls f(line_number, line) for each line of a product file.
template <class F>
void for_each_line(const fs::path& rel, F f) {
  std::ifstream in(kRoot / rel);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) f(n, line);
}

}  // namespace

TEST_CASE("the product's files name no session, issue or visit of the work", "[lint]") {
  REQUIRE(fs::is_directory(kRoot / "templates"));
  // "session 26", "issues 18-19", "the same visit", "visit 3", bench/NOTES.md (the team's
  // notebook, not the product's) and DESIGN.md's numbered sections (no such file).
  // "visit" as a verb or "visitor" (the filter's threads) is not a run: \b ends the word.
  const std::regex history(
      R"(\b(sessions? [0-9]|issues? [0-9]|visits? ?[0-9]|(same|this|that|gpu|device|each|one|a|next|later|earlier|first|second) visits?\b)|NOTES\.md|DESIGN\.md section)",
      std::regex::icase | std::regex::ECMAScript);
  std::string found;
  int files = 0;
  for (const fs::path& rel : product_files()) {
    ++files;
    for_each_line(rel, [&](int n, const std::string& line) {
      if (std::regex_search(line, history))
        found += rel.string() + ":" + std::to_string(n) + ": " + line + "\n";
    });
  }
  CHECK(files > 100);  // the walk found the tree, not an empty folder
  INFO("development history in the product's files:\n" << found);
  CHECK(found.empty());
}

TEST_CASE("every repository file the product's files name exists", "[lint]") {
  REQUIRE(fs::is_directory(kRoot / "templates"));
  // A path of the repository's folders ending in a file name with an extension
  // (docs/semantics.md, ops/common/topk_op.h, bench/results/<file>.jsonl), not inside a longer path
  // or a URL. A placeholder or a glob (<date>, *, {a,b}, ...) stops the token before its
  // extension, so those are not checked; nor are the generated source's include names
  // ("topk/tile_scoring.cuh"), which are not repository paths.
  const std::regex path_token(
      R"((^|[^A-Za-z0-9_./-])((bench|docs|ops|templates|runtime|compiler|tools|include|scripts|examples|tests|testing|python|cmake)/[A-Za-z0-9_./-]*\.[A-Za-z0-9]+))");
  std::string missing;
  int checked = 0;
  for (const fs::path& rel : product_files()) {
    for_each_line(rel, [&](int n, const std::string& line) {
      for (auto it = std::sregex_iterator(line.begin(), line.end(), path_token);
           it != std::sregex_iterator(); ++it) {
        const std::string name = (*it)[2].str();
        ++checked;
        if (!fs::exists(kRoot / name))
          missing += rel.string() + ":" + std::to_string(n) + ": " + name + "\n";
      }
    });
  }
  CHECK(checked > 50);  // the pattern still matches the names the tree uses
  INFO("names of files that are not in the repository:\n" << missing);
  CHECK(missing.empty());
}
