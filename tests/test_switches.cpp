// The switch registry (runtime/env.cpp) against the sources: docs/environment.md is its
// generated text, every WINNOW_ macro a template tests is registered as a macro, and every
// WINNOW_ variable C++ or Python source reads is registered as an environment variable.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "runtime/env.h"

namespace fs = std::filesystem;
using namespace winnow::rt;

namespace {

const fs::path kSourceDir = WINNOW_SOURCE_DIR;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool has_extension(const fs::path& p, std::initializer_list<const char*> exts) {
  for (const char* e : exts)
    if (p.extension() == e) return true;
  return false;
}

// name -> first file that uses it, for every match of group 1 of `re` in the files under
// `folder` with one of `exts`.
std::map<std::string, std::string> names_in(const char* folder,
                                            std::initializer_list<const char*> exts,
                                            const std::regex& re) {
  std::map<std::string, std::string> out;
  const fs::path root = kSourceDir / folder;
  if (!fs::exists(root)) return out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || !has_extension(entry.path(), exts)) continue;
    const std::string text = read_text(entry.path());
    for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it)
      out.emplace((*it)[1].str(), fs::relative(entry.path(), kSourceDir).string());
  }
  return out;
}

// The WINNOW_ names on a template's preprocessor conditionals (#if, #ifdef, #ifndef,
// #elif, defined(...) among them).
std::map<std::string, std::string> template_macros() {
  std::map<std::string, std::string> out;
  const std::regex conditional(R"(^\s*#\s*(if|ifdef|ifndef|elif)\b.*$)");
  const std::regex name(R"(\b(WINNOW_[A-Z0-9_]+))");
  for (const auto& entry : fs::recursive_directory_iterator(kSourceDir / "templates")) {
    if (!entry.is_regular_file() || entry.path().extension() != ".cuh") continue;
    std::istringstream in(read_text(entry.path()));
    for (std::string line; std::getline(in, line);) {
      if (!std::regex_match(line, conditional)) continue;
      for (std::sregex_iterator it(line.begin(), line.end(), name), end; it != end; ++it)
        out.emplace((*it)[1].str(), fs::relative(entry.path(), kSourceDir).string());
    }
  }
  return out;
}

void require_registered(const std::map<std::string, std::string>& used, SwitchKind kind) {
  for (const auto& [name, file] : used) {
    INFO(file << " uses " << name << ": declare it in runtime/env.cpp as "
              << to_string(kind));
    const Switch* s = find_switch(name.c_str());
    REQUIRE(s != nullptr);
    CHECK(s->kind == kind);
  }
}

}  // namespace

TEST_CASE("docs/environment.md is the registry's generated text", "[lint]") {
  INFO("regenerate it: build/winnow env --markdown > docs/environment.md");
  CHECK(read_text(kSourceDir / "docs" / "environment.md") == switches_markdown());
}

TEST_CASE("every WINNOW_ macro a template tests is registered", "[lint]") {
  const auto used = template_macros();
  CHECK(used.count("WINNOW_PHASE_CLOCKS") == 1);  // the scan finds what it should
  require_registered(used, SwitchKind::Macro);
}

TEST_CASE("every WINNOW_ variable the sources read is registered", "[lint]") {
  // C++: env_get / getenv with a literal name.
  const std::regex cpp_read(R"re(\b(?:env_get|getenv)\(\s*"(WINNOW_[A-Z0-9_]+)")re");
  std::map<std::string, std::string> used;
  for (const char* folder : {"runtime", "ops", "compiler", "tools", "testing", "tests", "python"})
    used.merge(names_in(folder, {".cpp", ".h", ".cc", ".hpp", ".cu", ".cuh"}, cpp_read));
  CHECK(used.count("WINNOW_NVRTC_OPTIONS") == 1);
  // Python: os.environ.get / os.environ[...] / os.getenv with a literal name.
  const std::regex py_read(
      R"re((?:environ\.get\(|environ\[|getenv\()\s*["'](WINNOW_[A-Z0-9_]+)["'])re");
  const auto py = names_in("python/winnow", {".py"}, py_read);
  CHECK(py.count("WINNOW_LIBRARY") == 1);
  used.insert(py.begin(), py.end());
  require_registered(used, SwitchKind::Environment);
}

TEST_CASE("every registered macro is still tested by a template", "[lint]") {
  const auto used = template_macros();
  for (const Switch& s : switch_registry()) {
    if (s.kind != SwitchKind::Macro) continue;
    INFO(s.name << " is registered but no template tests it: remove it from runtime/env.cpp");
    CHECK(used.count(s.name) == 1);
  }
}
