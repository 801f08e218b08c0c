// Every test case can run under ctest: catch_discover_tests hands each name back to
// winnow_tests as a test spec, where ';' splits a CMake list and '[' ']' start a tag, so a
// case named with them ran nothing under ctest. (Found 2026-12-02: a name with "[0, len)"
// folded the 120 cases after it into one ctest entry that matched no case, and the ';'
// names into halves that matched none, all "passing"; ctest now also runs every entry
// with --warn NoTests, so an entry that matches no case fails.)
#include <catch2/catch.hpp>

#include <string>

TEST_CASE("every test case name is a ctest name: no semicolon, bracket or backslash in it",
          "[names]") {
  const auto& all = Catch::getAllTestCasesSorted(*Catch::getCurrentContext().getConfig());
  CHECK(all.size() > 100);  // the registry is the whole suite, not this file's cases
  for (const Catch::TestCase& t : all) {
    INFO(t.name);
    CHECK(t.name.find_first_of(";[]\\") == std::string::npos);
    CHECK(!t.name.empty());
    CHECK(t.name.front() != ' ');
    CHECK(t.name.back() != ' ');
  }
}
