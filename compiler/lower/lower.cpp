#include "compiler/lower/lower.h"

namespace winnow::lower {

ir::Expr lower_score(const ir::Expr& score, int heads, std::vector<std::string>* log) {
  auto note = [&](const char* pass, const ir::Expr& e) {
    if (log) log->push_back(std::string(pass) + ": " + ir::print(e));
  };
  ir::verify(score, heads);
  note("verify", score);
  ir::Expr p = ir::canonicalise(score);
  note("canonicalise", p);
  ir::verify(p, heads);  // canonicalisation must keep a valid program
  return p;
}

}  // namespace winnow::lower
